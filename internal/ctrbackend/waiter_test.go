package ctrbackend

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"
)

func TestHandover(t *testing.T) {
	got := string(Handover("n0nce", "echo é\n", []string{"A=1", "B=two\nlines", "C="}, 127*time.Second+time.Millisecond, 5*time.Second))
	want := "n0nce 8 3 128 5 6\necho é\nA=1\x00B=two\nlines\x00C=\x00"
	if got != want {
		t.Errorf("Handover = %q, want %q", got, want)
	}
	if got := string(Handover("n", "true", nil, 0, 0)); got != "n 4 0 0 0 6\ntrue" {
		t.Errorf("Handover without environment = %q", got)
	}
}

func TestCheckEnv(t *testing.T) {
	if err := CheckEnv([]string{"PATH=/bin", "_x1=", "A=b=c", "N=two\nlines"}); err != nil {
		t.Errorf("CheckEnv refused a good environment: %v", err)
	}
	for _, bad := range []string{"NOVALUE", "=x", "1A=x", "A-B=x", "A B=x", "A=x\x00y", "A\x00=x", "É=x"} {
		if err := CheckEnv([]string{"OK=1", bad}); err == nil || !strings.Contains(err.Error(), "NAME=VALUE") {
			t.Errorf("CheckEnv(%q) = %v, want a refusal", bad, err)
		}
	}
}

// TestScannerSplits feeds output with the trailer, decoys (\x1e, the
// marker with another nonce, a marker prefix) and a trailer split at every
// byte, and checks that exactly the output before the trailer passes.
func TestScannerSplits(t *testing.T) {
	nonce := "0123456789abcdef0123456789abcdef"
	body := "a\x1eb\x1e0123\x1e" + "\x1effff" + nonce[:5] + " x\n" + strings.Repeat("z", 100) + "\x1e0123456789abcdef"
	stream := body + "\x1e" + nonce + " 3 1 -\n" + "after the trailer"
	for chunk := 1; chunk <= len(stream); chunk++ {
		var out strings.Builder
		s := NewScanner(&out, nonce)
		for i := 0; i < len(stream); i += chunk {
			_, _ = s.Write([]byte(stream[i:min(i+chunk, len(stream))]))
		}
		tr, err := s.Done()
		if err != nil || tr == nil || tr.ExitCode != 3 || tr.OOMKills != 1 || tr.Stop != "" {
			t.Fatalf("chunks of %d: trailer %+v, %v", chunk, tr, err)
		}
		if out.String() != body {
			t.Fatalf("chunks of %d: output %q, want %q", chunk, out.String(), body)
		}
	}
	// Without a trailer, Flush passes on what was held back.
	var out strings.Builder
	s := NewScanner(&out, nonce)
	_, _ = s.Write([]byte("end\x1e" + nonce[:7]))
	if out.String() != "end" {
		t.Errorf("a possible trailer start was not held back: %q", out.String())
	}
	s.Flush()
	if out.String() != "end\x1e"+nonce[:7] {
		t.Errorf("Flush: %q", out.String())
	}
}

// TestScannerTrailerBounded: a trailer start that never ends its line
// (whoever learned the nonce, such as a process that read a trailer off
// the output and survived the call) does not make the scanner hold the
// rest of the output in memory.
func TestScannerTrailerBounded(t *testing.T) {
	nonce := "0123456789abcdef0123456789abcdef"
	s := NewScanner(io.Discard, nonce)
	_, _ = s.Write([]byte("\x1e" + nonce + " "))
	chunk := bytes.Repeat([]byte("9"), 64<<10)
	for range 64 {
		_, _ = s.Write(chunk)
	}
	if len(s.pending) > 4<<10 {
		t.Errorf("the scanner holds %d bytes of an unterminated trailer", len(s.pending))
	}
	if tr, err := s.Done(); tr != nil || err == nil {
		t.Errorf("an unterminated 4 MiB trailer: %+v, %v; want a malformed-trailer error", tr, err)
	}
}
