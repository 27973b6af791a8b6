package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/sandbash/sandbash"
)

// terminalConfirmer asks on the controlling terminal, so it works even when
// stdin and stdout are redirected.
//
// The command is shown escaped (sandbash.EscapeCommand), so control
// characters in it cannot hide what runs. A multi-line command is shown with
// its line and byte counts and numbered lines, and a command taller than the
// terminal a screenful at a time (Enter for the next, q to refuse): the
// question comes only after every line was on screen, and nothing can scroll
// out of view unseen.
type terminalConfirmer struct{}

func (terminalConfirmer) Confirm(ctx context.Context, command string) (bool, error) {
	tty, err := os.OpenFile("/dev/tty", os.O_RDWR, 0)
	if err != nil {
		return false, fmt.Errorf("--confirm needs a terminal to ask on, and there is none (%v); run without --confirm or from a terminal", err)
	}
	defer tty.Close()
	rows, cols := ttySize(tty)
	in := bufio.NewReader(tty)
	ask := func(prompt string) (string, error) {
		fmt.Fprint(tty, prompt)
		line := make(chan string, 1)
		go func() {
			s, _ := in.ReadString('\n')
			line <- s
		}()
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case s := <-line:
			return strings.ToLower(strings.TrimSpace(s)), nil
		}
	}
	screen, lineOf, question := confirmText(command, cols)
	lines := lineOf[len(lineOf)-1]
	more := func(to int) string {
		return fmt.Sprintf("-- shown to line %d of %d; Enter for more, q to refuse -- ", to, lines)
	}
	// A page leaves rows for its prompt and one for the line the previous
	// answer was typed on.
	promptRows := (max(len(more(lines)), len(question)) + cols - 1) / cols
	page := max(rows-1-promptRows, 3)
	for len(screen) > page {
		fmt.Fprint(tty, strings.Join(screen[:page], "\n")+"\n")
		shownTo := lineOf[page-1]
		screen, lineOf = screen[page:], lineOf[page:]
		a, err := ask(more(shownTo))
		if err != nil {
			return false, err
		}
		if a == "q" || a == "n" || a == "no" {
			return false, nil
		}
	}
	fmt.Fprint(tty, strings.Join(screen, "\n")+"\n")
	a, err := ask(question)
	return a == "y" || a == "yes", err
}

// ttySize is the terminal's size, or 24x80 if it does not say. (Not
// tty.Fd: that would make reads blocking, and Close could not end one.)
func ttySize(tty *os.File) (rows, cols int) {
	rows, cols = 24, 80
	if rc, err := tty.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) {
			if ws, err := unix.IoctlGetWinsize(int(fd), unix.TIOCGWINSZ); err == nil && ws.Row > 0 && ws.Col > 0 {
				rows, cols = int(ws.Row), int(ws.Col)
			}
		})
	}
	return rows, cols
}

// confirmText lays out the question for a terminal cols wide: the rows to
// show, each shorter than cols, the command's line number on each row (0 for
// the heading), and the prompt. A command that fits on one row is shown as
// before; any other with its line and byte counts, and its lines numbered.
func confirmText(command string, cols int) (screen []string, lineOf []int, question string) {
	lines := strings.Split(sandbash.EscapeCommand(command), "\n")
	n := len(lines)
	add := func(line int, rows []string) {
		screen = append(screen, rows...)
		for range rows {
			lineOf = append(lineOf, line)
		}
	}
	if n == 1 {
		if rows := wrap(lines[0], "  $ ", "    ", cols); len(rows) == 1 {
			add(0, []string{"sandbash: run this command?"})
			add(1, rows)
			return screen, lineOf, "[y/N] "
		}
	}
	what := fmt.Sprintf("%d lines", n)
	if n == 1 {
		what = "1 line"
	}
	add(0, wrap(fmt.Sprintf("sandbash: run this command? %s, %d bytes; control characters are shown escaped:", what, len(command)), "", "", cols))
	w := len(strconv.Itoa(n))
	for i, l := range lines {
		add(i+1, wrap(l, fmt.Sprintf("%*d | ", w, i+1), strings.Repeat(" ", w)+" + ", cols))
	}
	return screen, lineOf, fmt.Sprintf("Run this command (%s, %d bytes)? [y/N] ", what, len(command))
}

// wrap splits s into rows that fit in cols-1 columns with their prefix:
// first before the first row, cont before the others. Tabs are expanded;
// a non-ASCII rune is counted as two columns, so that a wide character
// never makes a row wrap on the terminal (and rows are never undercounted).
func wrap(s, first, cont string, cols int) []string {
	width := max(cols-1-len(first), 10)
	var rows []string
	var row strings.Builder
	col := 0
	for _, r := range s {
		w := 1
		if r >= utf8.RuneSelf {
			w = 2
		}
		text := string(r)
		if r == '\t' {
			w = 8 - col%8
			text = strings.Repeat(" ", w)
		}
		if col+w > width && col > 0 {
			rows = append(rows, row.String())
			row.Reset()
			col = 0
			if r == '\t' {
				w, text = 8, "        "
			}
		}
		row.WriteString(text)
		col += w
	}
	rows = append(rows, row.String())
	for i := range rows {
		if i == 0 {
			rows[i] = first + rows[i]
		} else {
			rows[i] = cont + rows[i]
		}
	}
	return rows
}
