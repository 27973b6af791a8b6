// Package review keeps a session's changes to its workspace off the host
// until the user applies them (the workspace's overlay mode).
//
// The host workspace is the read-only lower layer of an overlay; every
// write of the session's calls lands in the session's own layers, in its
// directory. A Layer is that state on disk:
//
//	DIR/state.json   what is below, and when the session opened
//	DIR/upper        the live upper layer: the one overlayfs writes
//	DIR/work         overlayfs's work directory
//	DIR/layers/N     frozen layers, read-only lower layers above the host
//
// A checkpoint freezes the upper layer (a rename: nothing is copied) and
// starts an empty one above it; the mount then stacks the frozen layers
// between the new upper and the host (lowerdir=layers/3:layers/1:HOST).
// Restoring a checkpoint puts back its stack of frozen layers under an
// empty upper. Both cost the same whatever the size of the layer, on every
// filesystem: no reflinks needed, and no hard links that overlayfs's
// in-place writes to upper files would carry into a checkpoint.
//
// Frozen layers are never changed while a checkpoint refers to them. When
// Apply or Reset must take a path out of them, the stack is first squashed
// into one new layer of hard links (safe: nothing writes to a frozen layer's
// files in place), which the current view alone uses.
//
// The overlay is mounted with userxattr (overlayfs's metadata is
// user.overlay.*, which the layer's owner can read without privileges),
// redirect_dir=nofollow and metacopy=off (every change is a whole entry of
// the upper layer: renamed directories are copied, a chmod copies the
// data) and index=off: the layers alone, read as plain directories, say
// what changed. Whiteouts (character devices 0/0) are deletions; opaque
// directories (user.overlay.opaque=y) replace the host's directory whole.
//
// Nothing here may run while the layers are mounted: the caller unmounts
// them first (the session's calls are over and its sandbox released) and
// holds the session's lock.
package review

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Errors callers may test for.
var (
	// ErrNoCheckpoint: Restore was given a name no checkpoint has.
	ErrNoCheckpoint = errors.New("no such checkpoint")
	// ErrBadName: a checkpoint name that cannot be used.
	ErrBadName = errors.New("bad checkpoint name")
	// ErrHostMoved: the host workspace is no longer the directory the
	// session opened on.
	ErrHostMoved = errors.New("the host workspace changed")
	// ErrNotReview: the directory holds no layer.
	ErrNotReview = errors.New("not a reviewed workspace")
)

// MaxStack is the most frozen layers a mount stacks; a checkpoint past it
// squashes them into one (each is a lowerdir path in the mount options,
// which must fit in one page).
const MaxStack = 8

// Layer is one session's workspace layers, in its directory.
type Layer struct {
	dir string
	st  state
}

// state is state.json.
type state struct {
	// Host is the host workspace, and Dev and Ino what it was when the
	// session opened.
	Host string `json:"host"`
	Dev  uint64 `json:"dev"`
	Ino  uint64 `json:"ino"`
	UID  int    `json:"uid"`
	GID  int    `json:"gid"`
	// Opened is when the session opened, in nanoseconds (see nextTick):
	// a host file changed since has a ctime at or after it.
	Opened int64 `json:"opened"`
	// Stack is the frozen layers of the current view, top first.
	Stack []int `json:"stack"`
	// Checkpoints are the stacks saved by name.
	Checkpoints map[string]checkpoint `json:"checkpoints"`
	// Next numbers the next frozen layer.
	Next int `json:"next"`
	// Applied are the host entries Apply wrote, by path: they changed
	// since the session opened, but not behind its back.
	Applied map[string]stamp `json:"applied,omitempty"`
}

type checkpoint struct {
	Stack   []int     `json:"stack"`
	Created time.Time `json:"created"`
}

// stamp identifies one state of a host file: a write or a chmod moves its
// ctime.
type stamp struct {
	Dev, Ino uint64
	Ctime    int64
}

func stampOf(st *unix.Stat_t) stamp {
	return stamp{Dev: uint64(st.Dev), Ino: uint64(st.Ino), Ctime: st.Ctim.Nano()}
}

// Create makes a new layer in dir (which must not hold one) over the host
// workspace host (absolute, symlinks resolved), whose root belongs to
// uid:gid (see below for who may enter the directory); the upper layer's
// root copies the host root's mode and owner, since it is the root of
// what calls see.
func Create(dir, host string, uid, gid int) (*Layer, error) {
	hfd, err := openHost(host)
	if err != nil {
		return nil, err
	}
	defer unix.Close(hfd)
	var hst unix.Stat_t
	if err := unix.Fstat(hfd, &hst); err != nil {
		return nil, err
	}
	now, err := nextTick()
	if err != nil {
		return nil, err
	}
	// As root: root's, entered by the calls' group too (bwrap, running as
	// the workspace's owner, binds the mounted view from it), listed and
	// changed by root alone, so that the workspace's owner cannot swap
	// the state or a frozen layer for a symlink before root applies or
	// mounts them. Otherwise this user's alone.
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("review: %w", err)
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(dir, 0, gid); err != nil {
			return nil, fmt.Errorf("review: %w", err)
		}
		if err := os.Chmod(dir, 0o710); err != nil {
			return nil, fmt.Errorf("review: %w", err)
		}
	}
	l := &Layer{dir: dir, st: state{Host: host, Dev: uint64(hst.Dev), Ino: uint64(hst.Ino), UID: uid, GID: gid, Opened: now.Nano(), Checkpoints: map[string]checkpoint{}, Next: 1}}
	for _, d := range []string{"work", "layers"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			return nil, fmt.Errorf("review: %w", err)
		}
	}
	if err := l.newUpper(hst.Mode&0o7777, int(hst.Uid), int(hst.Gid)); err != nil {
		return nil, err
	}
	if err := l.save(); err != nil {
		return nil, err
	}
	return l, nil
}

// nextTick returns the time now and waits until the coarse clock has
// passed it (a few milliseconds): a file changed before has an older
// ctime; one changed after, a later one, whether the kernel stamped it
// with the coarse clock or a fine-grained one.
func nextTick() (unix.Timespec, error) {
	var now, coarse unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_REALTIME, &now); err != nil {
		return now, err
	}
	for {
		if err := unix.ClockGettime(unix.CLOCK_REALTIME_COARSE, &coarse); err != nil {
			return now, err
		}
		if coarse.Nano() > now.Nano() {
			return now, nil
		}
		time.Sleep(time.Millisecond)
	}
}

// Open reads the layer in dir.
func Open(dir string) (*Layer, error) {
	b, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("review: %s holds no workspace layer: %w", dir, ErrNotReview)
	}
	if err != nil {
		return nil, fmt.Errorf("review: %w", err)
	}
	l := &Layer{dir: dir}
	if err := json.Unmarshal(b, &l.st); err != nil {
		return nil, fmt.Errorf("review: %s is damaged (%v); close the session", filepath.Join(dir, "state.json"), err)
	}
	if l.st.Checkpoints == nil {
		l.st.Checkpoints = map[string]checkpoint{}
	}
	return l, nil
}

// Exists reports whether dir holds a layer.
func Exists(dir string) bool {
	_, err := os.Lstat(filepath.Join(dir, "state.json"))
	return err == nil
}

// Dir is the layer's directory.
func (l *Layer) Dir() string { return l.dir }

// Host is the host workspace.
func (l *Layer) Host() string { return l.st.Host }

// Upper and Work are the directories overlayfs writes to.
func (l *Layer) Upper() string { return filepath.Join(l.dir, "upper") }
func (l *Layer) Work() string  { return filepath.Join(l.dir, "work") }

// Stack returns the frozen layers' directories, top first: the lower
// layers between Upper and the host.
func (l *Layer) Stack() []string {
	var out []string
	for _, n := range l.st.Stack {
		out = append(out, l.layerDir(n))
	}
	return out
}

func (l *Layer) layerDir(n int) string { return filepath.Join(l.dir, "layers", strconv.Itoa(n)) }

// save writes state.json whole or not at all.
func (l *Layer) save() error {
	b, err := json.MarshalIndent(l.st, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(l.dir, ".state.json.tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("review: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(l.dir, "state.json")); err != nil {
		return fmt.Errorf("review: %w", err)
	}
	return nil
}

// newUpper makes an empty upper layer whose root has the given mode and
// owner.
func (l *Layer) newUpper(mode uint32, uid, gid int) error {
	up := l.Upper()
	if err := os.Mkdir(up, 0o700); err != nil {
		return fmt.Errorf("review: %w", err)
	}
	if os.Geteuid() == 0 {
		if err := os.Lchown(up, uid, gid); err != nil {
			return fmt.Errorf("review: %w", err)
		}
	}
	if err := unix.Chmod(up, mode); err != nil {
		return fmt.Errorf("review: %w", err)
	}
	return nil
}

// Compiled at first use: package init runs before every command.
var nameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`) })

// CheckName refuses a checkpoint name that cannot be used.
func CheckName(name string) error {
	if !nameRE().MatchString(name) {
		return fmt.Errorf("review: checkpoint name %q: use 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit: %w", name, ErrBadName)
	}
	return nil
}

// Checkpoint is a saved state of the session's layer.
type Checkpoint struct {
	Name    string
	Created time.Time
}

// Checkpoints lists the checkpoints, oldest first.
func (l *Layer) Checkpoints() []Checkpoint {
	var out []Checkpoint
	for n, c := range l.st.Checkpoints {
		out = append(out, Checkpoint{Name: n, Created: c.Created})
	}
	slices.SortFunc(out, func(a, b Checkpoint) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return compareStrings(a.Name, b.Name)
	})
	return out
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// MountOptions are the overlayfs options a workspace's layers must be
// mounted with (besides lowerdir, upperdir and workdir): see the package
// comment.
const MountOptions = "userxattr,redirect_dir=nofollow,metacopy=off,index=off"

// LowerDirs is the lowerdir list of the mount: the stack, then the host
// workspace (or what stands for it, such as a staged clone).
func (l *Layer) LowerDirs(host string) []string { return append(l.Stack(), host) }
