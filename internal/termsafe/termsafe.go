// Package termsafe shows untrusted text on a terminal without letting it act
// on the terminal.
//
// A [Writer] passes printable text, valid UTF-8, newlines, tabs and plain
// colour (SGR: ESC [ params m, params only digits, ';' and ':') through
// unchanged, and writes everything else that a terminal would act on as
// visible Go-style escapes, the same form sandbash.EscapeCommand uses:
//
//	ESC                 \x1b  (so "ESC ] 52 ; c ; ... BEL" shows as \x1b]52;c;...\x07)
//	other C0, DEL       \x00 ... \x1f, \x7f (BEL \x07, backspace \x08, ...)
//	bare carriage return \r   (unless KeepCR)
//	C1 controls         \u0080 ... \u009f (decoded from UTF-8)
//	bidi overrides      \u202a ... \u202e, \u2066 ... \u2069
//	invalid UTF-8       \xNN, one per byte (a raw 0x9b is CSI to an 8-bit terminal)
//
// Escaping the ESC byte alone is enough to defuse every escape sequence
// (OSC, DCS, APC, PM, SOS, CSI, and the single-character ones such as ESC c):
// without it the rest of the sequence is plain text, which the terminal
// prints. Showing that text keeps the sequence readable. Only SGR is kept,
// and only in full: the terminal never sees a partial sequence, so text
// written to it afterwards (by sandbash or anyone) cannot be swallowed into
// one.
//
// The filter is a byte-at-a-time state machine, so output arriving in
// arbitrary chunks gives the same result as the whole: an escape sequence or
// a UTF-8 character split across writes is held back (at most maxHeld
// bytes) until it is complete. An SGR sequence longer than that is written
// escaped. [Writer.Flush] writes whatever is held back, escaped, and resets
// the colour if the text changed it.
package termsafe

import (
	"fmt"
	"io"
	"os"
	"sync"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// maxHeld bounds the bytes held back: an SGR sequence's ESC, '[' and
// parameters. 64 is twice the longest sane one (two 24-bit colours).
const maxHeld = 64

// Options change what passes unchanged.
type Options struct {
	// KeepCR passes a bare carriage return. It moves the cursor to the
	// start of the current line only, so it can overwrite the line being
	// written but nothing printed before it; progress bars use it. Without
	// KeepCR it is shown as \r (a \r directly followed by \n always passes:
	// it hides nothing).
	KeepCR bool
}

type state uint8

const (
	ground state = iota
	escape       // after ESC
	csi          // after ESC [, holding parameters
	cr           // after a \r, without KeepCR: passes if \n follows
)

// Writer is a filter in front of a terminal. It is safe for concurrent use.
type Writer struct {
	mu       sync.Mutex
	w        io.Writer
	opt      Options
	st       state
	held     []byte // ESC [ params, or an incomplete UTF-8 character
	coloured bool   // an SGR other than a reset has passed
	out      []byte
}

// NewWriter returns a filter that writes to w.
func NewWriter(w io.Writer, opt Options) *Writer {
	return &Writer{w: w, opt: opt, held: make([]byte, 0, maxHeld)}
}

// Write filters p. It reports all of p as written unless w fails.
func (t *Writer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.out = t.out[:0]
	for _, b := range p {
		t.byte(b)
	}
	return len(p), t.emit()
}

// Flush writes what is held back, escaped, and resets the colour (ESC [ m)
// if an SGR sequence changed it. Call it when the text ends, before anything
// else is written to the terminal.
func (t *Writer) Flush() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.out = t.out[:0]
	t.flushHeld()
	if t.coloured {
		t.out = append(t.out, "\x1b[m"...)
		t.coloured = false
	}
	return t.emit()
}

func (t *Writer) emit() error {
	if len(t.out) == 0 {
		return nil
	}
	_, err := t.w.Write(t.out)
	return err
}

// flushHeld writes the held bytes escaped and returns to ground.
func (t *Writer) flushHeld() {
	switch t.st {
	case escape, csi:
		t.escByte(0x1b)
		t.out = append(t.out, t.held[1:]...) // '[' and digits, ';', ':'
	case cr:
		t.out = append(t.out, `\r`...)
	case ground:
		for _, b := range t.held { // an incomplete UTF-8 character
			t.escByte(b)
		}
	}
	t.held = t.held[:0]
	t.st = ground
}

func (t *Writer) escByte(b byte) {
	t.out = fmt.Appendf(t.out, `\x%02x`, b)
}

func (t *Writer) byte(b byte) {
	switch t.st {
	case escape:
		if b == '[' {
			t.held = append(t.held, b)
			t.st = csi
			return
		}
		t.flushHeld() // not CSI: the ESC shown escaped, b as usual
	case csi:
		switch {
		case b >= '0' && b <= '9' || b == ';' || b == ':':
			if len(t.held) < maxHeld {
				t.held = append(t.held, b)
				return
			}
		case b == 'm':
			params := string(t.held[2:])
			t.out = append(t.out, t.held...)
			t.out = append(t.out, 'm')
			t.held = t.held[:0]
			t.st = ground
			t.coloured = params != "" && params != "0"
			return
		}
		t.flushHeld() // over-long, or not SGR: shown escaped, b as usual
	case cr:
		t.st = ground
		if b == '\n' {
			t.out = append(t.out, '\r', '\n')
			return
		}
		t.out = append(t.out, `\r`...)
	}
	if len(t.held) > 0 || b >= utf8.RuneSelf {
		t.utf8Byte(b)
		return
	}
	t.ascii(b)
}

func (t *Writer) ascii(b byte) {
	switch {
	case b == 0x1b:
		t.held = append(t.held, b)
		t.st = escape
	case b == '\n' || b == '\t':
		t.out = append(t.out, b)
	case b == '\r' && t.opt.KeepCR:
		t.out = append(t.out, b)
	case b == '\r':
		t.st = cr
	case b < 0x20 || b == 0x7f:
		t.escByte(b)
	default:
		t.out = append(t.out, b)
	}
}

// utf8Byte adds b to an incomplete UTF-8 character (or starts one) and
// writes the character once it is complete, escaped if it is a control.
func (t *Writer) utf8Byte(b byte) {
	t.held = append(t.held, b)
	if !utf8.FullRune(t.held) {
		return
	}
	r, size := utf8.DecodeRune(t.held)
	if r == utf8.RuneError && size == 1 {
		// Invalid: escape the first byte and start again after it, as
		// utf8.DecodeRune would on the whole text.
		rest := append([]byte(nil), t.held[1:]...)
		t.escByte(t.held[0])
		t.held = t.held[:0]
		for _, c := range rest {
			t.byte(c)
		}
		return
	}
	if Hidden(r) {
		t.out = fmt.Appendf(t.out, `\u%04x`, r)
	} else {
		t.out = append(t.out, t.held...)
	}
	t.held = t.held[:0]
}

// Hidden reports the non-ASCII runes a terminal acts on instead of printing:
// C1 controls (U+0080..U+009F: to a terminal U+009B is CSI, U+009D OSC,
// U+0090 DCS), and the bidirectional embeddings, overrides and isolates that
// reorder how the text around them is shown.
func Hidden(r rune) bool {
	return r >= 0x80 && r <= 0x9f ||
		r >= 0x202a && r <= 0x202e ||
		r >= 0x2066 && r <= 0x2069
}

// IsTerminal reports whether w is an open file on a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// ForTerminal returns w wrapped in a filter if w is a terminal, else w
// itself: text going to a pipe or a file stays byte for byte. flush is to be
// called when the text ends (a no-op for w itself).
func ForTerminal(w io.Writer, opt Options) (out io.Writer, flush func()) {
	if !IsTerminal(w) {
		return w, func() {}
	}
	t := NewWriter(w, opt)
	return t, func() { _ = t.Flush() }
}

// EscapeJSON writes the Hidden runes in encoded JSON as \uXXXX escapes:
// encoding/json leaves C1 controls and bidi overrides raw, and a terminal
// acts on those. Outside strings JSON is ASCII, so every such rune is in a
// string, and the decoded value stays the same.
func EscapeJSON(b []byte) []byte {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if Hidden(r) {
			out = fmt.Appendf(out, `\u%04x`, r)
		} else {
			out = append(out, b[i:i+size]...)
		}
		i += size
	}
	return out
}
