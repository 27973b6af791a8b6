package output

import (
	"bytes"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestCaptureMatchesReference writes random streams in random chunks and
// compares what Capture kept with the stream itself.
func TestCaptureMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		size := r.IntN(400)
		if i%3 == 0 {
			size = r.IntN(40)
		}
		stream := make([]byte, size)
		for j := range stream {
			stream[j] = 'a' + byte(r.IntN(26))
		}
		dir := t.TempDir()
		opt := Options{Head: 1 + r.IntN(30), Tail: 1 + r.IntN(30), Dir: dir, Name: "spill", SpillLimit: int64(1 + r.IntN(500))}
		c := New(opt)
		for rest := stream; len(rest) > 0; {
			n := min(len(rest), 1+r.IntN(70))
			if w, err := c.Write(rest[:n]); w != n || err != nil {
				t.Fatalf("Write = %d, %v", w, err)
			}
			rest = rest[n:]
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if c.Total() != int64(len(stream)) {
			t.Fatalf("Total = %d, want %d", c.Total(), len(stream))
		}
		fits := len(stream) <= opt.Head+opt.Tail
		if c.Truncated() == fits {
			t.Fatalf("size %d head %d tail %d: Truncated = %v", len(stream), opt.Head, opt.Tail, c.Truncated())
		}
		text := c.Text()
		if fits {
			if text != string(stream) || c.SpillPath() != "" {
				t.Fatalf("fitting output changed: %q vs %q, spill %q", text, stream, c.SpillPath())
			}
			continue
		}
		if !strings.HasPrefix(text, string(stream[:opt.Head])) || !strings.HasSuffix(text, string(stream[len(stream)-opt.Tail:])) {
			t.Fatalf("head/tail wrong:\n%q\nstream %q head %d tail %d", text, stream, opt.Head, opt.Tail)
		}
		got, err := os.ReadFile(c.SpillPath())
		if err != nil {
			t.Fatal(err)
		}
		want := stream[:min(int64(len(stream)), opt.SpillLimit)]
		if !bytes.Equal(got, want) {
			t.Fatalf("spill file differs from the stream (%d vs %d bytes)", len(got), len(want))
		}
	}
}

func TestCaptureMarker(t *testing.T) {
	c := New(Options{Head: 4, Tail: 4, Dir: t.TempDir(), Name: "out"})
	c.Write([]byte("0123456789abcdef"))
	c.Close()
	want := "0123\n\n[... 8 bytes omitted of 16 bytes in total; full output: " + c.SpillPath() + " ...]\n\ncdef"
	if got := c.Text(); got != want {
		t.Errorf("Text =\n%q\nwant\n%q", got, want)
	}
	c = New(Options{Head: 4, Tail: 4})
	c.Write([]byte("0123456789abcdef"))
	if !strings.Contains(c.Text(), "not saved") {
		t.Errorf("no spill dir: %q", c.Text())
	}
}

func TestCaptureInvalidUTF8(t *testing.T) {
	// "é" is two bytes; cut at 3 bytes it splits a rune at both ends.
	c := New(Options{Head: 3, Tail: 3})
	c.Write([]byte("aéé\xff\xfe middle ééé"))
	if s := c.Text(); !utf8.ValidString(s) || !strings.HasPrefix(s, "aé\n") || !strings.HasSuffix(s, "\né") {
		t.Errorf("Text = %q", s)
	}
	c = New(Options{})
	c.Write([]byte("bad \xff\xc3 bytes"))
	if s := c.Text(); !utf8.ValidString(s) || !strings.Contains(s, "bytes") {
		t.Errorf("Text = %q", s)
	}
}
