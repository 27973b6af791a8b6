// Package devcontainer reads the container image a workspace declares in its
// devcontainer.json (https://containers.dev), which is JSON with comments and
// trailing commas.
//
// The workspace is writable by the commands sandbash runs, so the file is
// hostile input: it is opened without following symbolic links (in any
// component below the workspace) and without blocking, and only a regular
// file of at most [MaxSize] bytes is read. A FIFO, a device, a socket or a
// link there is an error at once, never a hang or an endless read. What the
// caller does with the image (trust it or not) is its business; [File.Sum]
// identifies the exact content the image came from.
package devcontainer

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/tailscale/hujson"
	"golang.org/x/sys/unix"
)

// MaxSize is the largest devcontainer.json read: 1 MiB.
const MaxSize = 1 << 20

// ErrNotFound means the workspace has no devcontainer.json.
var ErrNotFound = errors.New("no devcontainer.json")

// ErrNoImage means the workspace's devcontainer.json names no image.
var ErrNoImage = errors.New("no devcontainer image")

// ErrUnsafe means the file is not a plain regular file of at most MaxSize
// bytes, reachable without following a symbolic link.
var ErrUnsafe = errors.New("devcontainer.json is not a plain file")

// Files are where a devcontainer.json may be, relative to the workspace, in
// the order they are looked at.
var Files = []string{".devcontainer/devcontainer.json", ".devcontainer.json"}

// File is a workspace's devcontainer.json as it was read.
type File struct {
	// Path is the file: the workspace joined with one of Files.
	Path string
	// Sum is the hex SHA-256 of the content read, the content Image
	// comes from.
	Sum string
	// Image is its "image" ("" when Read fails with ErrNoImage).
	Image string
}

// Read reads the workspace's devcontainer.json, once, safely (see the
// package comment). It fails with ErrNotFound when there is none (or the
// workspace itself does not exist), with ErrUnsafe when the file is not a
// plain regular file of at most MaxSize, and with ErrNoImage (and Path and
// Sum set) when it names no image. Every other failure also names the file.
func Read(workspace string) (File, error) {
	ws, err := unix.Open(workspace, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return File{}, ErrNotFound
		}
		return File{}, fmt.Errorf("devcontainer: opening the workspace %s: %w", workspace, err)
	}
	defer unix.Close(ws)
	for _, rel := range Files {
		path := filepath.Join(workspace, rel)
		b, err := readAt(ws, workspace, rel)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return File{Path: path}, err
		}
		sum := sha256.Sum256(b)
		f := File{Path: path, Sum: hex.EncodeToString(sum[:])}
		f.Image, err = parse(path, b)
		return f, err
	}
	return File{}, ErrNotFound
}

// readAt reads rel below the directory ws (the workspace, open) without
// following symlinks in any of rel's components and without blocking.
func readAt(ws int, workspace, rel string) ([]byte, error) {
	parts := strings.Split(rel, "/")
	dir := ws
	defer func() {
		if dir != ws {
			unix.Close(dir)
		}
	}()
	for i, name := range parts {
		path := filepath.Join(workspace, filepath.Join(parts[:i+1]...))
		last := i == len(parts)-1
		flags := unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC
		if !last {
			flags |= unix.O_DIRECTORY
		}
		fd, err := openat(dir, name, flags)
		if errors.Is(err, unix.ENOENT) {
			return nil, ErrNotFound
		}
		if err != nil {
			return nil, refusal(path, describeAt(dir, name, err))
		}
		if !last {
			if dir != ws {
				unix.Close(dir)
			}
			dir = fd
			continue
		}
		f := os.NewFile(uintptr(fd), path)
		defer f.Close()
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return nil, fmt.Errorf("devcontainer: %s: %w", path, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			return nil, refusal(path, "is "+kind(st.Mode))
		}
		if st.Size > MaxSize {
			return nil, tooBig(path, st.Size)
		}
		b, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
		if err != nil {
			return nil, fmt.Errorf("devcontainer: reading %s: %w", path, err)
		}
		if len(b) > MaxSize {
			return nil, tooBig(path, int64(len(b)))
		}
		return b, nil
	}
	panic("unreachable")
}

func openat(dir int, name string, flags int) (int, error) {
	for {
		fd, err := unix.Openat(dir, name, flags, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// describeAt says why name in dir could not be opened: what it is, when
// that is the reason.
func describeAt(dir int, name string, err error) string {
	var st unix.Stat_t
	if unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG, unix.S_IFDIR:
		default:
			return "is " + kind(st.Mode)
		}
	}
	if errors.Is(err, unix.ENOTDIR) {
		return "is not a directory"
	}
	return fmt.Sprintf("cannot be opened (%v)", err)
}

func kind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return "a symbolic link"
	case unix.S_IFIFO:
		return "a named pipe (FIFO)"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	case unix.S_IFDIR:
		return "a directory"
	}
	return fmt.Sprintf("not a regular file (mode %#o)", mode&unix.S_IFMT)
}

func refusal(path, what string) error {
	return fmt.Errorf("devcontainer: %s %s; sandbash reads devcontainer.json only as a regular file, not through a symbolic link (a command in the sandbox can put anything there): make it a plain file, remove it, or give the image with --image: %w", path, what, ErrUnsafe)
}

func tooBig(path string, n int64) error {
	return fmt.Errorf("devcontainer: %s is %d bytes, more than the 1 MiB sandbash reads; shorten it, remove it, or give the image with --image: %w", path, n, ErrUnsafe)
}

// validImageRef reports whether s is what an image reference can hold: 1
// to 512 letters, digits and ._/:@- , starting with a letter or digit;
// never a space, a quote, a shell or terminal control character, so the
// name can be shown and pasted into a shell as it is. (A function, not a
// regular expression: compiling `{0,511}` took half a millisecond at every
// start of sandbash.)
func validImageRef(s string) bool {
	if s == "" || len(s) > 512 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || !strings.ContainsRune("._/:@-", rune(c))) {
			return false
		}
	}
	return true
}

// parse returns the "image" of a devcontainer.json's content.
func parse(path string, b []byte) (string, error) {
	std, err := hujson.Standardize(b)
	if err != nil {
		return "", fmt.Errorf("devcontainer: %s is not valid JSON with comments: %v", path, err)
	}
	var doc struct {
		Image         string         `json:"image"`
		Build         map[string]any `json:"build"`
		DockerFile    string         `json:"dockerFile"`
		DockerCompose any            `json:"dockerComposeFile"`
	}
	if err := json.Unmarshal(std, &doc); err != nil {
		return "", fmt.Errorf("devcontainer: %s: %v", path, err)
	}
	switch {
	case doc.Image != "" && !validImageRef(doc.Image):
		return "", fmt.Errorf("devcontainer: %s: \"image\" %q is not an image reference (letters, digits and . _ / : @ - only); fix it, or give the image with --image", path, doc.Image)
	case doc.Image != "":
		return doc.Image, nil
	case doc.Build != nil || doc.DockerFile != "" || doc.DockerCompose != nil:
		return "", fmt.Errorf("devcontainer: %s builds its image (build, dockerFile or dockerComposeFile) instead of naming one; build it and pass the image with --image or SANDBASH_IMAGE: %w", path, ErrNoImage)
	}
	return "", fmt.Errorf("devcontainer: %s names no \"image\": %w", path, ErrNoImage)
}
