package backendtest

import (
	"crypto/rand"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/sandbash/sandbash"
)

// defaultPids is the process limit every backend applies by default
// (backend.DefaultLimits); the fork test stops a little past it so that a
// backend without the limit fails the test instead of taking the host down.
const defaultPids = 4096

// testForkBomb: a call that forks until it cannot is stopped by the
// call's own process limit, well before the host's, and ends; nothing of it
// survives, and the session goes on working.
func testForkBomb(f *fixture) {
	s := f.open(sandbash.Config{})
	// A duration no other process on the host sleeps for, to find the
	// call's processes from the host afterwards.
	n, _ := rand.Int(rand.Reader, big.NewInt(1e9))
	nap := fmt.Sprintf("3000.%09d", n.Int64())
	cmd := fmt.Sprintf(`sh -c 'i=0; while [ $i -lt %d ]; do sleep %s & i=$((i+1)); echo $i > /tmp/forks; done' 2>/dev/null
read n < /tmp/forks; echo "forked $n"`, defaultPids+512, nap)
	r := f.run(s, cmd)
	var forked int
	if _, err := fmt.Sscanf(r.Output, "forked %d", &forked); err != nil {
		f.t.Fatalf("fork test: exit %d, output %q", r.ExitCode, r.Output)
	}
	if forked >= defaultPids+512 || forked < defaultPids/2 {
		f.t.Errorf("the call forked %d processes; want the process limit (%d) to stop it", forked, defaultPids)
	}
	if left := processesWith(nap); len(left) > 0 {
		f.t.Errorf("%d processes of the fork test outlived its call, e.g. %s", len(left), left[0])
	}
	f.expect(s, "echo fine", 0, "fine\n")
}

// testTmpBounded: one file in /tmp or HOME (host directories kept for the
// session) cannot grow without bound: a 100 GiB file fails cleanly (the
// sparse truncate first, so that a backend without the bound does not fill
// the disk), and the session goes on working.
func testTmpBounded(f *fixture) {
	s := f.open(sandbash.Config{})
	r := f.run(s, `for f in /tmp/big "$HOME/big"; do
  if truncate -s 100G "$f" 2>/dev/null; then echo "$f: truncate to 100G succeeded"; rm -f "$f"
  elif fallocate -l 100G "$f" 2>/dev/null; then echo "$f: fallocate of 100G succeeded"; rm -f "$f"
  fi
done
echo checked`)
	if strings.Contains(r.Output, "succeeded") || !strings.Contains(r.Output, "checked") {
		f.t.Errorf("a 100 GiB file in /tmp or HOME: exit %d, output %q", r.ExitCode, r.Output)
	}
	for _, sub := range []string{"tmp", "home"} {
		p := filepath.Join(s.Dir(), sub, "big")
		if fi, err := os.Stat(p); err == nil {
			if used := fi.Sys().(*syscall.Stat_t).Blocks * 512; fi.Size() > 1<<20 || used > 1<<20 {
				f.t.Errorf("%s on the host: size %d, %d bytes allocated", p, fi.Size(), used)
			}
		}
	}
	f.expect(s, "echo fine", 0, "fine\n")
}

// testMemoryCapped: the memory limit holds for the call as a whole: a
// process that fits alone does not fit beside a file in /dev/shm (tmpfs is
// memory), and /dev/shm cannot take more than the limit, whether the write
// fails or the call is killed. Where the limit is per process, a process
// over it fails to allocate.
func testMemoryCapped(f *fixture) {
	f.b = f.caps.MemoryLimited(f.t, 64<<20)
	s := f.open(sandbash.Config{})
	const alloc = "dd if=/dev/zero of=/dev/null bs=41943040 count=1 2>/dev/null && echo allocated"
	// 40 MiB fits in 64 MiB on its own...
	f.expect(s, alloc, 0, "allocated\n")
	if f.caps.MemoryPerProcess {
		// ...but 80 MiB in one process does not.
		f.expect(s, strings.ReplaceAll(alloc, "41943040", "83886080")+" || echo refused", 0, "refused\n")
	} else {
		// ...but not beside 30 MiB of /dev/shm.
		r := f.run(s, "head -c 31457280 /dev/zero > /dev/shm/held && echo written; "+alloc)
		if !strings.Contains(r.Output, "written") || strings.Contains(r.Output, "allocated") {
			f.t.Errorf("30 MiB in /dev/shm, then 40 MiB in a process, under a 64 MiB limit: exit %d, output %q", r.ExitCode, r.Output)
		}
	}
	r, err := s.Run(f.ctx, sandbash.Request{Command: "head -c 134217728 /dev/zero > /dev/shm/fill 2>/dev/null; echo \"size $(stat -c %s /dev/shm/fill)\""})
	if r != nil && strings.Contains(r.Output, "size 134217728") {
		f.t.Errorf("/dev/shm took 128 MiB under a 64 MiB limit: exit %d, output %q (%v)", r.ExitCode, r.Output, err)
	}
	f.expect(s, "echo fine", 0, "fine\n")
}
