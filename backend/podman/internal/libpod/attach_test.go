package libpod

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
)

func frame(stream byte, s string) []byte {
	h := make([]byte, 8, 8+len(s))
	h[0] = stream
	binary.BigEndian.PutUint32(h[4:], uint32(len(s)))
	return append(h, s...)
}

func demux(b []byte) (stdout, stderr string, err error) {
	var o, e bytes.Buffer
	a := &Attachment{r: bufio.NewReader(bytes.NewReader(b))}
	err = a.Demux(&o, &e)
	return o.String(), e.String(), err
}

// TestDemux: frames go to their stream in order, larger than a read buffer
// too; the stream's end between frames is its end, but a stream cut
// within a frame, or a frame of the service's error stream (3), is an
// error, never a clean end of the output.
func TestDemux(t *testing.T) {
	big := strings.Repeat("x", 100<<10)
	var in []byte
	in = append(in, frame(1, "out1 ")...)
	in = append(in, frame(2, "err1 ")...)
	in = append(in, frame(0, "out2 ")...)
	in = append(in, frame(1, big)...)
	o, e, err := demux(in)
	if err != nil || o != "out1 out2 "+big || e != "err1 " {
		t.Errorf("whole stream: stdout %.20q (%d bytes), stderr %q, %v", o, len(o), e, err)
	}
	for _, cut := range []int{len(in) - 1, len(in) - len(big) - 3} {
		if _, _, err := demux(in[:cut]); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("cut at %d of %d: %v, want io.ErrUnexpectedEOF", cut, len(in), err)
		}
	}
	o, _, err = demux(append(frame(1, "before "), frame(3, "the container is gone")...))
	if err == nil || !strings.Contains(err.Error(), "the container is gone") || o != "before " {
		t.Errorf("error frame: stdout %q, %v", o, err)
	}
	if _, _, err := demux(frame(7, "?")); !errors.Is(err, ErrLostSync) {
		t.Errorf("stream 7: %v, want ErrLostSync", err)
	}
}
