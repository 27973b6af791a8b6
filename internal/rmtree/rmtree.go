// Package rmtree removes directory trees with their removals side by side.
//
// Removing a directory can take milliseconds: a filesystem mounted with
// discard (as cloud disks often are) discards the directory's block at
// once, and rmdir waits for it (2 ms per directory on the machine issue 15
// was measured on). Those waits overlap: a session's directory (its /tmp,
// HOME, spill files and cache layers) goes in about the time of its deepest
// chain of directories rather than of all of them.
package rmtree

import (
	"os"
	"path/filepath"
	"sync"
)

// width bounds the removals under way at once.
const width = 16

// RemoveAll removes dir and everything below it, as os.RemoveAll does
// (symbolic links are removed, never followed; a dir that does not exist
// is no error). dir's entries go side by side, and so do the entries of
// each of its subdirectories, each with os.RemoveAll; a subdirectory goes
// as soon as its own entries have, and dir last. dir and its
// subdirectories must be the caller's own, as a session's directory and
// its tmp, home and output are: a path below them is opened through them.
func RemoveAll(dir string) error {
	entries, err := os.ReadDir(dir)
	if err == nil {
		sem := make(chan struct{}, width)
		remove := func(p string) {
			sem <- struct{}{}
			defer func() { <-sem }()
			_ = os.RemoveAll(p)
		}
		var wg sync.WaitGroup
		for _, e := range entries {
			p := filepath.Join(dir, e.Name())
			wg.Add(1)
			go func() {
				defer wg.Done()
				if !e.IsDir() { // a file, a symbolic link, ...: never followed
					remove(p)
					return
				}
				sub, _ := os.ReadDir(p)
				var swg sync.WaitGroup
				for _, s := range sub {
					swg.Add(1)
					go func() {
						defer swg.Done()
						remove(filepath.Join(p, s.Name()))
					}()
				}
				swg.Wait()
				remove(p)
			}()
		}
		wg.Wait()
	}
	// Whatever failed above is tried once more, and reported, here.
	return os.RemoveAll(dir)
}
