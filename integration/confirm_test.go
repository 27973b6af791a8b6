package integration

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestConfirmShowsEveryLine: --confirm shows a long multi-line command a
// screenful at a time, numbered and escaped, so that no line scrolls out of
// view before the question; q refuses it.
func TestConfirmShowsEveryLine(t *testing.T) {
	c := newCLI(t)
	const rows, cols, n = 24, 80, 60
	var lines []string
	for i := 1; i <= n; i++ {
		switch i {
		case 30:
			lines = append(lines, "# "+strings.Repeat("long ", 100))
		case 45:
			lines = append(lines, "echo hidden # \r\x1b[2K\x1b[1Aharmless")
		case n:
			lines = append(lines, "touch ran")
		default:
			lines = append(lines, fmt.Sprintf(": step %d", i))
		}
	}
	script := strings.Join(lines, "\n")

	for _, yes := range []bool{false, true} {
		k := startConsole(t, c, rows, cols, "run", "--backend", "bwrap", "--confirm", "--", script)
		var shown strings.Builder
		for asked := false; !asked; {
			if !k.waitFor(func(s string) bool { return strings.HasSuffix(s, "[y/N] ") || strings.HasSuffix(s, "q to refuse -- ") }) {
				code, out := k.finish()
				t.Fatalf("sandbash ended (exit %d) without asking:\n%s", code, out)
			}
			screen := k.since()
			shown.WriteString(screen)
			// Rows from the line the last answer was typed on to the
			// prompt, with the terminal's wrapping: all must be in view.
			// The first screen counts from the confirmation's first row:
			// sandbash's notices before it (as a user: the limits that
			// hold) may scroll away, they are not the command.
			counted := screen
			if i := strings.Index(counted, "sandbash: run this command?"); i >= 0 {
				counted = counted[i:]
			}
			used := 0
			for _, l := range strings.Split(counted, "\n") {
				used += max(1, (utf8.RuneCountInString(l)+cols-1)/cols)
			}
			if used > rows {
				t.Errorf("one screen of the confirmation takes %d rows of a %d-row terminal: its top scrolled out of view before the question:\n%s", used, rows, screen)
			}
			asked = strings.HasSuffix(screen, "[y/N] ")
			switch {
			case asked && yes:
				k.answer("y\n")
			case asked:
				k.answer("n\n")
			case !yes:
				k.answer("q\n")
				asked = true
			default:
				k.answer("\n")
			}
		}
		code, out := k.finish()
		all := shown.String()
		onlySGR(t, "confirmation", out)
		if !strings.Contains(all, fmt.Sprintf("%d lines", n)) {
			t.Errorf("the confirmation does not say the command has %d lines:\n%s", n, all)
		}
		if yes {
			for i, l := range lines {
				want := fmt.Sprintf("%d | %s", i+1, l)
				if i+1 == 45 {
					want = fmt.Sprintf(`%d | echo hidden # \r\x1b[2K\x1b[1Aharmless`, i+1)
				}
				if i+1 == 30 {
					want = want[:40]
				}
				if !strings.Contains(all, want) {
					t.Errorf("the confirmation does not show line %d as %q", i+1, want)
				}
			}
		}
		_, err := os.Stat(filepath.Join(c.dir, "ran"))
		switch {
		case yes && (code != 0 || err != nil):
			t.Errorf("confirmed: exit %d, %v:\n%s", code, err, out)
		case !yes && (code != 125 || err == nil || !bytes.Contains([]byte(out), []byte("not run"))):
			t.Errorf("refused: exit %d, ran: %v:\n%s", code, err == nil, out)
		}
	}
}
