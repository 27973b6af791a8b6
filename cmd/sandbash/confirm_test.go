package main

import (
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sandbash/sandbash"
)

// prefixRE matches what confirmText puts before a line: its number, or the
// mark of a continued row.
var prefixRE = regexp.MustCompile(`^( *[0-9]+ \| | +\+ |  \$ |    )`)

func TestConfirmTextShortCommand(t *testing.T) {
	screen, lineOf, q := confirmText("make test", 80)
	if strings.Join(screen, "\n") != "sandbash: run this command?\n  $ make test" || q != "[y/N] " || len(lineOf) != 2 {
		t.Errorf("%q %v %q", screen, lineOf, q)
	}
}

// TestConfirmTextFits: every row fits in the terminal (counting a non-ASCII
// rune as two columns), and every character of every line is shown, in
// order, escaped.
func TestConfirmTextFits(t *testing.T) {
	commands := []string{
		strings.Repeat("x", 5000),
		"echo 日本語🙂\t" + strings.Repeat("é", 300) + "\n\tindented\n\n" + strings.Repeat("a\tb ", 100),
		"rm -rf ~ # \r\x1b[2K\x1b]52;c;eA==\x07\u009b1A\u202e" + strings.Repeat("\t", 40),
	}
	for _, cmd := range commands {
		for _, cols := range []int{20, 41, 80, 200} {
			screen, lineOf, q := confirmText(cmd, cols)
			if len(screen) != len(lineOf) || q == "" {
				t.Fatalf("%d rows, %d line numbers, prompt %q", len(screen), len(lineOf), q)
			}
			lines := strings.Split(sandbash.EscapeCommand(cmd), "\n")
			got := make([]string, len(lines)+1)
			for i, row := range screen {
				w := 0
				for _, r := range row {
					if r < 0x20 || r == 0x7f || r >= 0x80 && r <= 0x9f {
						t.Fatalf("row %q holds control %U", row, r)
					}
					w++
					if r >= utf8.RuneSelf {
						w++
					}
				}
				if w >= cols {
					t.Errorf("cols %d: row %q is %d columns", cols, row, w)
				}
				if lineOf[i] > 0 {
					row = strings.TrimPrefix(row, prefixRE.FindString(row))
				}
				got[lineOf[i]] += strings.Join(strings.Fields(row), "")
			}
			for i, l := range lines {
				want := strings.Join(strings.Fields(l), "")
				if got[i+1] != want {
					t.Errorf("cols %d: line %d shown as %q, want %q", cols, i+1, got[i+1], want)
				}
			}
		}
	}
}
