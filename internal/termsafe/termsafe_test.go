package termsafe

import (
	"bytes"
	"encoding/json"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

// filter runs s through a Writer in the given chunks and flushes.
func filter(opt Options, chunks ...string) string {
	var b bytes.Buffer
	w := NewWriter(&b, opt)
	for _, c := range chunks {
		if n, err := w.Write([]byte(c)); n != len(c) || err != nil {
			panic("short write")
		}
	}
	_ = w.Flush()
	return b.String()
}

var cases = []struct {
	name, in, want string
	keepCR         bool
}{
	{"plain", "hello, world\n\tindented\n", "hello, world\n\tindented\n", false},
	{"utf8", "héllo ✓ 日本 🙂\n", "héllo ✓ 日本 🙂\n", false},
	{"sgr", "\x1b[31mred\x1b[0m plain\n", "\x1b[31mred\x1b[0m plain\n", false},
	{"sgr no params", "\x1b[1mbold\x1b[m", "\x1b[1mbold\x1b[m", false},
	{"sgr left on is reset", "\x1b[38;2;255;0;0mred", "\x1b[38;2;255;0;0mred\x1b[m", false},
	{"sgr colon", "\x1b[38:2::1:2:3mx\x1b[0m", "\x1b[38:2::1:2:3mx\x1b[0m", false},
	{"osc 52 bel", "\x1b]52;c;cHduZWQ=\x07after", `\x1b]52;c;cHduZWQ=\x07after`, false},
	{"osc 52 st", "\x1b]52;c;cHduZWQ=\x1b\\after", `\x1b]52;c;cHduZWQ=\x1b\after`, false},
	{"osc title", "\x1b]0;pwned\x07", `\x1b]0;pwned\x07`, false},
	{"osc 8 link", "\x1b]8;;http://evil/\x1b\\click\x1b]8;;\x1b\\", `\x1b]8;;http://evil/\x1b\click\x1b]8;;\x1b\`, false},
	{"dcs", "\x1bP+q544e\x1b\\", `\x1bP+q544e\x1b\`, false},
	{"apc pm sos", "\x1b_a\x1b\\\x1b^b\x1b\\\x1bXc\x1b\\", `\x1b_a\x1b\\x1b^b\x1b\\x1bXc\x1b\`, false},
	{"cursor up", "one\n\x1b[1A\x1b[2Ktwo", `one` + "\n" + `\x1b[1A\x1b[2Ktwo`, false},
	{"cursor position", "\x1b[H\x1b[2J", `\x1b[H\x1b[2J`, false},
	{"scroll region", "\x1b[1;5r", `\x1b[1;5r`, false},
	{"alt screen", "\x1b[?1049h", `\x1b[?1049h`, false},
	{"bracketed paste", "\x1b[?2004l\x1b[201~", `\x1b[?2004l\x1b[201~`, false},
	{"device status", "\x1b[6n\x1b[c\x1b[>c", `\x1b[6n\x1b[c\x1b[>c`, false},
	{"modifyOtherKeys is not colour", "\x1b[>4;2m", `\x1b[>4;2m`, false},
	{"private sgr-like", "\x1b[?31m", `\x1b[?31m`, false},
	{"intermediate", "\x1b[0 q", `\x1b[0 q`, false},
	{"reset", "\x1bc", `\x1bc`, false},
	{"save restore", "\x1b7x\x1b8", `\x1b7x\x1b8`, false},
	{"index", "\x1bD\x1bM\x1bE", `\x1bD\x1bM\x1bE`, false},
	{"charset", "\x1b(0lqk", `\x1b(0lqk`, false},
	{"double esc", "\x1b\x1b[31m", `\x1b` + "\x1b[31m" + "\x1b[m", false},
	{"esc at end", "text\x1b", `text\x1b`, false},
	{"csi at end", "text\x1b[12;3", `text\x1b[12;3`, false},
	{"csi broken by control", "\x1b[3\x07m", `\x1b[3\x07m`, false},
	{"c1 csi", "\u009b31m\u009d0;t\u0007\u0090q\u009c", `\u009b31m\u009d0;t\x07\u0090q\u009c`, false},
	{"raw c1 bytes", "\x9b31m\x9d52;c;x\x07", `\x9b31m\x9d52;c;x\x07`, false},
	{"invalid utf8", "caf\xe9 \xff\xfe \xc0\xaf \xed\xa0\x80", `caf\xe9 \xff\xfe \xc0\xaf \xed\xa0\x80`, false},
	{"truncated utf8 then esc", "\xe2\x9c\x1b]0;x\x07", `\xe2\x9c\x1b]0;x\x07`, false},
	{"truncated utf8 at end", "ok \xe2\x9c", `ok \xe2\x9c`, false},
	{"bel bs del", "a\x07b\x08c\x7fd", `a\x07b\x08c\x7fd`, false},
	{"other c0", "\x00\x01\x0b\x0c\x0e\x1f", `\x00\x01\x0b\x0c\x0e\x1f`, false},
	{"bidi", "a\u202eevil\u202c \u2067x\u2069", `a\u202eevil\u202c \u2067x\u2069`, false},
	{"cr shown", "hidden\rshown\n", `hidden\rshown` + "\n", false},
	{"crlf passes", "dos\r\nline\r\n", "dos\r\nline\r\n", false},
	{"cr at end", "x\r", `x\r`, false},
	{"cr cr lf", "x\r\r\n", `x\r` + "\r\n", false},
	{"cr kept", "50%\r100%\n", "50%\r100%\n", true},
	{"cr kept esc not", "\r\x1b[1A", "\r" + `\x1b[1A`, true},
	{"long sgr", "\x1b[" + strings.Repeat("1;", 40) + "m", `\x1b[` + strings.Repeat("1;", 40) + "m", false},
}

func TestFilter(t *testing.T) {
	for _, tc := range cases {
		opt := Options{KeepCR: tc.keepCR}
		if got := filter(opt, tc.in); got != tc.want {
			t.Errorf("%s: %q\n got %q\nwant %q", tc.name, tc.in, got, tc.want)
		}
	}
}

// TestEverySplit: a sequence split across writes at any point, or written a
// byte at a time, comes out as if written whole.
func TestEverySplit(t *testing.T) {
	for _, tc := range cases {
		opt := Options{KeepCR: tc.keepCR}
		for i := 0; i <= len(tc.in); i++ {
			for j := i; j <= len(tc.in); j++ {
				if got := filter(opt, tc.in[:i], tc.in[i:j], tc.in[j:]); got != tc.want {
					t.Fatalf("%s split at %d,%d: got %q, want %q", tc.name, i, j, got, tc.want)
				}
			}
		}
		var bytewise []string
		for i := range len(tc.in) {
			bytewise = append(bytewise, tc.in[i:i+1])
		}
		if got := filter(opt, bytewise...); got != tc.want {
			t.Fatalf("%s byte at a time: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

var sgr = regexp.MustCompile(`^\x1b\[[0-9;:]*m`)

// checkSafe fails unless out is something a terminal can only print: valid
// UTF-8, no ESC except to start a complete SGR sequence, no C0 control but
// \n, \t and \r (a bare \r only with KeepCR), no DEL, no C1, no bidi control.
func checkSafe(t *testing.T, in, out string, opt Options) {
	t.Helper()
	if !utf8.ValidString(out) {
		t.Fatalf("%q gave invalid UTF-8 %q", in, out)
	}
	for i := 0; i < len(out); {
		r, size := utf8.DecodeRuneInString(out[i:])
		switch {
		case r == 0x1b:
			m := sgr.FindString(out[i:])
			if m == "" {
				t.Fatalf("%q gave a raw ESC that does not start SGR at %d: %q", in, i, out)
			}
			size = len(m)
		case r == '\r' && !opt.KeepCR:
			if !strings.HasPrefix(out[i:], "\r\n") {
				t.Fatalf("%q gave a bare \\r at %d: %q", in, i, out)
			}
		case r == '\n' || r == '\t' || r == '\r':
		case r < 0x20 || r == 0x7f || Hidden(r):
			t.Fatalf("%q gave control %U at %d: %q", in, r, i, out)
		}
		i += size
	}
}

// alphabet is weighted towards the bytes that make sequences.
var alphabet = []byte("\x1b\x1b\x1b[[[]]]PX^_\\;;:0123456789mmmAHJKnhlrqc78DM\x07\x08\r\r\n\t\x00\x7f a?>\x80\x90\x9b\x9c\x9d\x9f\xc2\xc2\xe2\x80\xae\xff")

func randomInput(rng *rand.Rand) string {
	b := make([]byte, rng.Intn(80))
	for i := range b {
		b[i] = alphabet[rng.Intn(len(alphabet))]
	}
	return string(b)
}

func randomChunks(rng *rand.Rand, s string) []string {
	var chunks []string
	for len(s) > 0 {
		n := rng.Intn(len(s) + 1)
		chunks = append(chunks, s[:n])
		s = s[n:]
	}
	return chunks
}

// TestRandomInput checks the safety property, and that chunking does not
// matter, on many random inputs made of sequence-building bytes.
func TestRandomInput(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for range 20000 {
		in := randomInput(rng)
		for _, opt := range []Options{{}, {KeepCR: true}} {
			whole := filter(opt, in)
			checkSafe(t, in, whole, opt)
			if got := filter(opt, randomChunks(rng, in)...); got != whole {
				t.Fatalf("%q: chunked %q, whole %q", in, got, whole)
			}
		}
	}
}

func FuzzFilter(f *testing.F) {
	for _, tc := range cases {
		f.Add(tc.in, uint8(3))
	}
	f.Fuzz(func(t *testing.T, in string, seed uint8) {
		rng := rand.New(rand.NewSource(int64(seed)))
		for _, opt := range []Options{{}, {KeepCR: true}} {
			whole := filter(opt, in)
			checkSafe(t, in, whole, opt)
			if got := filter(opt, randomChunks(rng, in)...); got != whole {
				t.Fatalf("%q: chunked %q, whole %q", in, got, whole)
			}
		}
	})
}

// TestPrintableUnchanged: text without controls passes byte for byte.
func TestPrintableUnchanged(t *testing.T) {
	in := "build ok: 3 packages, 0 failures — ✓ ünïcødé 日本語 🙂\n\tnext\n"
	if got := filter(Options{}, in); got != in {
		t.Errorf("got %q", got)
	}
}

func TestIsTerminal(t *testing.T) {
	f, err := openFile(t)
	if err != nil {
		t.Fatal(err)
	}
	if IsTerminal(f) {
		t.Error("a regular file is a terminal")
	}
	if IsTerminal(&bytes.Buffer{}) {
		t.Error("a buffer is a terminal")
	}
	w, flush := ForTerminal(f, Options{})
	if w != f {
		t.Error("ForTerminal wrapped a regular file")
	}
	flush()
}

func openFile(t *testing.T) (*os.File, error) {
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err == nil {
		t.Cleanup(func() { f.Close() })
	}
	return f, err
}

func TestEscapeJSON(t *testing.T) {
	in := map[string]string{"output": "\x1b]52;c;x\x07 \u009b?1049h \u202eevil ok é"}
	raw, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	got := EscapeJSON(raw)
	var back map[string]string
	if err := json.Unmarshal(got, &back); err != nil || back["output"] != in["output"] {
		t.Fatalf("escaped JSON %s decodes to %q, %v", got, back, err)
	}
	checkSafe(t, string(raw), string(got), Options{})
	if !bytes.Contains(got, []byte(`\u009b?1049h`)) || !bytes.Contains(got, []byte("ok é")) {
		t.Errorf("got %s", got)
	}
}

// BenchmarkWriter filters typical build output: text, some colour, a
// progress bar.
func BenchmarkWriter(b *testing.B) {
	chunk := []byte(strings.Repeat("ok  \tgithub.com/x/y\t0.123s \x1b[32mPASS\x1b[0m ünïcødé\r\n", 50) + "50%\r")
	w := NewWriter(io.Discard, Options{KeepCR: true})
	b.SetBytes(int64(len(chunk)))
	for b.Loop() {
		_, _ = w.Write(chunk)
	}
}
