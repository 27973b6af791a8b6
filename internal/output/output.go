// Package output captures a call's combined output in bounded memory.
//
// A [Capture] keeps the first and last [DefaultHead]/[DefaultTail] bytes for
// the rendered result, counts every byte, and, once the output is larger than
// what it keeps, writes the whole stream to a spill file (up to a limit; past
// it bytes are counted, not stored). Memory use is the same for 1 KiB and for
// 100 GiB of output.
package output

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// Defaults for [Options].
const (
	DefaultHead       = 15 << 10
	DefaultTail       = 15 << 10
	DefaultSpillLimit = 64 << 20
)

// Options configure a Capture. Zero values select the defaults.
type Options struct {
	// Head and Tail are how many bytes of the beginning and the end are
	// kept for Text. Zero means DefaultHead / DefaultTail.
	Head, Tail int
	// Dir is where the spill file goes. Empty means no spill file: the
	// omitted middle is then lost, and Text says so.
	Dir string
	// Name is the spill file's name inside Dir.
	Name string
	// SpillLimit caps the spill file; zero means DefaultSpillLimit.
	SpillLimit int64
}

// Capture is an io.Writer that never fails and never grows past its bounds.
// It is not safe for concurrent writes.
type Capture struct {
	opt Options

	buf      []byte // all output while it fits in Head+Tail; then the head
	ring     []byte // the last Tail bytes once the output overflowed
	ringPos  int
	ringFull bool
	overflow bool
	total    int64

	spill     *os.File
	spillPath string
	spilled   int64
	spillErr  error
}

// New returns an empty Capture.
func New(opt Options) *Capture {
	if opt.Head <= 0 {
		opt.Head = DefaultHead
	}
	if opt.Tail <= 0 {
		opt.Tail = DefaultTail
	}
	if opt.SpillLimit <= 0 {
		opt.SpillLimit = DefaultSpillLimit
	}
	return &Capture{opt: opt}
}

// Write records p. It always reports success: a spill-file error is kept and
// shown by Text, and capturing goes on.
func (c *Capture) Write(p []byte) (int, error) {
	n0 := len(p)
	c.total += int64(n0)
	if !c.overflow {
		if len(c.buf)+len(p) <= c.opt.Head+c.opt.Tail {
			c.buf = append(c.buf, p...)
			return len(p), nil
		}
		c.overflow = true
		c.openSpill()
		c.writeSpill(c.buf)
		c.ring = make([]byte, c.opt.Tail)
		if len(c.buf) > c.opt.Head {
			c.writeRing(c.buf[c.opt.Head:])
			c.buf = c.buf[:c.opt.Head:c.opt.Head]
		}
	}
	c.writeSpill(p)
	if rest := c.opt.Head - len(c.buf); rest > 0 {
		n := min(rest, len(p))
		c.buf = append(c.buf, p[:n]...)
		p = p[n:]
	}
	c.writeRing(p)
	return n0, nil
}

func (c *Capture) writeRing(p []byte) {
	if len(p) >= len(c.ring) {
		copy(c.ring, p[len(p)-len(c.ring):])
		c.ringPos, c.ringFull = 0, true
		return
	}
	n := copy(c.ring[c.ringPos:], p)
	if n < len(p) {
		copy(c.ring, p[n:])
		c.ringFull = true
	}
	c.ringPos = (c.ringPos + len(p)) % len(c.ring)
	if c.ringPos == 0 && len(p) > 0 {
		c.ringFull = true
	}
}

func (c *Capture) tail() []byte {
	if !c.ringFull {
		return c.ring[:c.ringPos]
	}
	return append(append([]byte(nil), c.ring[c.ringPos:]...), c.ring[:c.ringPos]...)
}

func (c *Capture) openSpill() {
	if c.opt.Dir == "" {
		return
	}
	path := filepath.Join(c.opt.Dir, c.opt.Name)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		c.spillErr = err
		return
	}
	c.spill, c.spillPath = f, path
}

func (c *Capture) writeSpill(p []byte) {
	if c.spill == nil || c.spillErr != nil {
		return
	}
	if room := c.opt.SpillLimit - c.spilled; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := c.spill.Write(p)
	c.spilled += int64(n)
	if err != nil {
		c.spillErr = err
	}
}

// Close closes the spill file, if any. The file stays on disk.
func (c *Capture) Close() error {
	if c.spill == nil {
		return nil
	}
	err := c.spill.Close()
	c.spill = nil
	if err != nil && c.spillErr == nil {
		c.spillErr = err
	}
	return err
}

// Total is the number of bytes written, kept or not.
func (c *Capture) Total() int64 { return c.total }

// Truncated reports whether Text leaves out part of the output.
func (c *Capture) Truncated() bool { return c.overflow }

// SpillPath is the spill file's path, or "" if the output fit in memory or
// no spill file could be written.
func (c *Capture) SpillPath() string { return c.spillPath }

// Text renders the captured output as valid UTF-8: all of it if it fit,
// otherwise the head, a marker giving the bytes omitted, the exact total and
// where the full output is, and the tail.
func (c *Capture) Text() string {
	if !c.overflow {
		return strings.ToValidUTF8(string(c.buf), "\uFFFD")
	}
	head := trimHead(c.buf)
	tail := trimTail(c.tail())
	omitted := c.total - int64(len(head)) - int64(len(tail))
	var where string
	switch {
	case c.spillPath != "" && c.spillErr == nil && c.spilled == c.total:
		where = "full output: " + c.spillPath
	case c.spillPath != "" && c.spillErr == nil:
		where = fmt.Sprintf("the first %d bytes are in %s (spill limit reached)", c.spilled, c.spillPath)
	case c.spillErr != nil:
		where = "the full output could not be saved: " + c.spillErr.Error()
	default:
		where = "the full output was not saved"
	}
	return fmt.Sprintf("%s\n\n[... %d bytes omitted of %d bytes in total; %s ...]\n\n%s",
		strings.ToValidUTF8(string(head), "\uFFFD"), omitted, c.total, where,
		strings.ToValidUTF8(string(tail), "\uFFFD"))
}

// trimHead drops an incomplete rune cut off at the end of b.
func trimHead(b []byte) []byte {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i]
			}
			break
		}
	}
	return b
}

// trimTail drops the continuation bytes of a rune cut off at the start of b.
func trimTail(b []byte) []byte {
	for i := 0; i < len(b) && i < utf8.UTFMax-1; i++ {
		if utf8.RuneStart(b[i]) {
			return b[i:]
		}
	}
	return b
}
