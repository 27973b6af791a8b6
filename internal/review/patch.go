package review

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	udiff "github.com/aymanbagabas/go-udiff"
)

// The patch is in git's format (diff --git, index lines with blob ids,
// new/deleted file mode, rename from/to, symlinks as mode 120000), so that
// `git apply` and review tools read it. It holds the text changes; binary
// files, directories, special files, modes git cannot say (0600) and what
// Apply refuses are listed in a comment block before it, which git apply
// skips. What Apply refuses is never in the patch: applying the patch
// with git does no more than Apply.

// text loads the content of c's sides and works out its hunks.
func (v *view) text(c *Change) error {
	if c.Old.Type != File && c.New.Type != File && c.Old.Type != Symlink && c.New.Type != Symlink {
		return nil
	}
	oldB, err := v.side(c, true)
	if errors.Is(err, errTooLarge) {
		c.Binary = true
		return nil
	} else if err != nil {
		return err
	}
	newB, err := v.side(c, false)
	if errors.Is(err, errTooLarge) {
		c.Binary = true
		return nil
	} else if err != nil {
		return err
	}
	if (c.Old.Type == File && binary(oldB)) || (c.New.Type == File && binary(newB)) {
		c.Binary = true
		return nil
	}
	c.lines = true
	if c.Kind == TypeChanged {
		// Shown as a deletion and an addition, as git does.
		c.Deletions, c.Insertions = countLines(oldB), countLines(newB)
		return nil
	}
	for _, h := range hunks(oldB, newB) {
		for _, l := range h.Lines {
			switch l.Kind {
			case udiff.Insert:
				c.Insertions++
			case udiff.Delete:
				c.Deletions++
			}
		}
	}
	return nil
}

// side reads the old (host) or new (session) content of c: a file's bytes
// or a symlink's target; nil when that side has neither.
func (v *view) side(c *Change, old bool) ([]byte, error) {
	e, p, root := c.New, c.Path, -1
	if c.layer >= 0 {
		root = v.roots[c.layer]
	}
	if old {
		e, root = c.Old, v.host
		if c.Kind == Renamed {
			p = c.From
		}
	}
	switch e.Type {
	case File:
		return readAt(root, p)
	case Symlink:
		return []byte(e.Target), nil
	}
	return nil, nil
}

// binary is git's rule: a NUL byte in the first 8000 bytes.
func binary(b []byte) bool { return bytes.IndexByte(b[:min(len(b), 8000)], 0) >= 0 }

func countLines(b []byte) int {
	n := bytes.Count(b, []byte("\n"))
	if len(b) > 0 && b[len(b)-1] != '\n' {
		n++
	}
	return n
}

func hunks(a, b []byte) []*udiff.Hunk {
	edits := udiff.Lines(string(a), string(b))
	u, err := udiff.ToUnifiedDiff("a", "b", string(a), edits, udiff.DefaultContextLines)
	if err != nil {
		return nil // cannot happen: the edits are the library's own
	}
	return u.Hunks
}

// gitMode is git's mode for an entry: 100644, 100755 or 120000.
func gitMode(e Entry) string {
	switch {
	case e.Type == Symlink:
		return "120000"
	case e.Mode&0o100 != 0:
		return "100755"
	}
	return "100644"
}

// blobID is git's object id of content.
func blobID(b []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(b))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

const nullID = "0000000000000000000000000000000000000000"

// quote quotes a path as git does (core.quotePath): in double quotes with
// C escapes when it holds a quote, a backslash, a control character or a
// byte over 0x7f. No name can start a line of its own in the patch.
func quote(p string) string {
	need := false
	for i := 0; i < len(p); i++ {
		if c := p[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			need = true
			break
		}
	}
	if !need {
		return p
	}
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(p); i++ {
		switch c := p[i]; c {
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case '\a':
			b.WriteString(`\a`)
		case '\b':
			b.WriteString(`\b`)
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\v':
			b.WriteString(`\v`)
		case '\f':
			b.WriteString(`\f`)
		case '\r':
			b.WriteString(`\r`)
		default:
			if c < 0x20 || c >= 0x7f {
				fmt.Fprintf(&b, `\%03o`, c)
			} else {
				b.WriteByte(c)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}

// qp is a/P or b/P, quoted as a whole.
func qp(prefix, p string) string { return quote(prefix + p) }

// inPatch reports whether c has a section in the patch.
func inPatch(c *Change) bool {
	if c.Refused != "" || c.Binary || !c.lines && !modeOnly(c) {
		return false
	}
	return true
}

// modeOnly: a file whose git mode alone changed.
func modeOnly(c *Change) bool {
	return c.Kind == Modified && c.Old.Type == File && c.New.Type == File && gitMode(c.Old) != gitMode(c.New) && !c.lines
}

// listed reports whether c goes in the list before the patch, and with
// what note.
func listed(c *Change) (string, bool) {
	var notes []string
	switch {
	case c.New.Type == Dir && c.Old.Type != Dir:
		notes = append(notes, "new directory")
	case c.Old.Type == Dir && c.New.Type == None:
		notes = append(notes, "directory deleted")
	case c.Old.Type == Dir && c.New.Type == Dir:
		notes = append(notes, fmt.Sprintf("directory mode %04o -> %04o", c.Old.Mode, c.New.Mode))
	}
	if c.Kind == TypeChanged {
		notes = append(notes, c.Old.Type.String()+" -> "+c.New.Type.String())
	}
	if c.Kind == Deleted && c.Old.Type != Dir {
		notes = append(notes, "deleted")
	}
	if c.Kind == Renamed {
		notes = append(notes, "renamed from "+quote(c.From))
	}
	if c.Old.Type != None && c.New.Type != None && c.Old.Type != Dir && c.Old.Mode != c.New.Mode && c.Old.Type != Symlink && c.New.Type != Symlink {
		notes = append(notes, fmt.Sprintf("mode %04o -> %04o", c.Old.Mode, c.New.Mode))
	}
	if c.New.Type == Symlink {
		notes = append(notes, "symlink to "+quote(c.New.Target))
	}
	if c.Binary {
		notes = append(notes, fmt.Sprintf("binary, %d -> %d bytes, not in the patch", c.Old.Size, c.New.Size))
	}
	if c.New.Type == Special {
		notes = append(notes, specialName(c.New.st.Mode))
	}
	if c.Conflict != "" {
		notes = append(notes, "CONFLICT: "+c.Conflict+"; apply refuses it")
	}
	if c.Refused != "" {
		notes = append(notes, "NOT APPLIED: "+c.Refused)
	}
	if len(notes) == 0 {
		return "", false
	}
	return strings.Join(notes, "; "), true
}

// WritePatch writes the list and the patch.
func (cs *Changes) WritePatch(w io.Writer) error {
	v, err := cs.l.open()
	if err != nil {
		return err
	}
	defer v.close()
	var b bytes.Buffer
	fmt.Fprintf(&b, "# sandbash: %d change(s) to %s not yet applied\n", len(cs.List), quote(cs.Host))
	for i := range cs.List {
		c := &cs.List[i]
		if note, ok := listed(c); ok {
			fmt.Fprintf(&b, "#   %c %s: %s\n", c.Kind, quote(c.Path), note)
		}
	}
	if _, err := w.Write(b.Bytes()); err != nil {
		return err
	}
	for i := range cs.List {
		c := &cs.List[i]
		if !inPatch(c) {
			continue
		}
		b.Reset()
		if err := v.section(&b, c); err != nil {
			return err
		}
		if _, err := w.Write(b.Bytes()); err != nil {
			return err
		}
	}
	return nil
}

// section writes c's part of the patch.
func (v *view) section(b *bytes.Buffer, c *Change) error {
	oldB, err := v.side(c, true)
	if err != nil {
		return fmt.Errorf("review: reading %s on the host: %w", c.Path, err)
	}
	newB, err := v.side(c, false)
	if err != nil {
		return fmt.Errorf("review: reading %s in the session's layer: %w", c.Path, err)
	}
	oldP := c.Path
	if c.Kind == Renamed {
		oldP = c.From
	}
	head := func(a, bp string) { fmt.Fprintf(b, "diff --git %s %s\n", qp("a/", a), qp("b/", bp)) }
	body := func(oldName, newName string, x, y []byte) {
		if bytes.Equal(x, y) {
			return
		}
		fmt.Fprintf(b, "--- %s\n+++ %s\n", oldName, newName)
		for _, h := range hunks(x, y) {
			writeHunk(b, h)
		}
	}
	switch {
	case c.Kind == TypeChanged || c.Old.Type == None || c.New.Type == None:
		if c.Old.Type == File || c.Old.Type == Symlink {
			head(oldP, oldP)
			fmt.Fprintf(b, "deleted file mode %s\nindex %s..%s\n", gitMode(c.Old), blobID(oldB), nullID)
			body(qp("a/", oldP), "/dev/null", oldB, nil)
		}
		if c.New.Type == File || c.New.Type == Symlink {
			head(c.Path, c.Path)
			fmt.Fprintf(b, "new file mode %s\nindex %s..%s\n", gitMode(c.New), nullID, blobID(newB))
			body("/dev/null", qp("b/", c.Path), nil, newB)
		}
	default:
		head(oldP, c.Path)
		if gitMode(c.Old) != gitMode(c.New) {
			fmt.Fprintf(b, "old mode %s\nnew mode %s\n", gitMode(c.Old), gitMode(c.New))
		}
		if c.Kind == Renamed {
			fmt.Fprintf(b, "similarity index 100%%\nrename from %s\nrename to %s\n", quote(c.From), quote(c.Path))
		}
		if !bytes.Equal(oldB, newB) {
			fmt.Fprintf(b, "index %s..%s", blobID(oldB), blobID(newB))
			if gitMode(c.Old) == gitMode(c.New) {
				fmt.Fprintf(b, " %s", gitMode(c.New))
			}
			b.WriteByte('\n')
			body(qp("a/", oldP), qp("b/", c.Path), oldB, newB)
		}
	}
	return nil
}

func writeHunk(b *bytes.Buffer, h *udiff.Hunk) {
	from, to := 0, 0
	for _, l := range h.Lines {
		switch l.Kind {
		case udiff.Delete:
			from++
		case udiff.Insert:
			to++
		default:
			from++
			to++
		}
	}
	fmt.Fprintf(b, "@@ -%s +%s @@\n", hunkRange(h.FromLine, from), hunkRange(h.ToLine, to))
	for _, l := range h.Lines {
		switch l.Kind {
		case udiff.Delete:
			b.WriteByte('-')
		case udiff.Insert:
			b.WriteByte('+')
		default:
			b.WriteByte(' ')
		}
		b.WriteString(l.Content)
		if !strings.HasSuffix(l.Content, "\n") {
			b.WriteString("\n\\ No newline at end of file\n")
		}
	}
}

// hunkRange is one side of a hunk header, as GNU diff and git write it:
// "start,count", "start" for one line, and for no lines the line before.
func hunkRange(start, count int) string {
	switch count {
	case 0:
		return strconv.Itoa(start-1) + ",0"
	case 1:
		return strconv.Itoa(start)
	}
	return strconv.Itoa(start) + "," + strconv.Itoa(count)
}

// WriteStat writes one line per change and a summary, like git's
// --stat with its --name-status letter.
func (cs *Changes) WriteStat(w io.Writer) error {
	var b bytes.Buffer
	width := 0
	names := make([]string, len(cs.List))
	for i, c := range cs.List {
		names[i] = quote(c.Path)
		if c.Kind == Renamed {
			names[i] = quote(c.From) + " => " + quote(c.Path)
		}
		width = max(width, len(names[i]))
	}
	ins, del := 0, 0
	for i := range cs.List {
		c := &cs.List[i]
		var what string
		switch {
		case c.Binary:
			what = fmt.Sprintf("Bin %d -> %d bytes", c.Old.Size, c.New.Size)
		case c.lines:
			what = fmt.Sprintf("%d %s%s", c.Insertions+c.Deletions, strings.Repeat("+", min(c.Insertions, 40)), strings.Repeat("-", min(c.Deletions, 40)))
			ins += c.Insertions
			del += c.Deletions
		default:
			note, _ := listed(c)
			what = note
		}
		flag := ""
		switch {
		case c.Refused != "":
			flag = "  (not applied: see diff)"
		case c.Conflict != "":
			flag = "  (conflict: changed on the host)"
		}
		fmt.Fprintf(&b, " %c %-*s | %s%s\n", c.Kind, width, names[i], what, flag)
	}
	fmt.Fprintf(&b, " %d change(s), %d insertion(s)(+), %d deletion(s)(-)\n", len(cs.List), ins, del)
	_, err := w.Write(b.Bytes())
	return err
}
