package owner

import (
	"os"
	"os/exec"
	"strconv"
	"testing"
)

func TestSelfIsAliveAndParses(t *testing.T) {
	s := Self()
	id, err := Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	if id.PID != os.Getpid() || id.UID != os.Geteuid() || id.Start == 0 {
		t.Errorf("Self = %q parsed as %+v", s, id)
	}
	if Gone(s) {
		t.Errorf("this live process is taken for gone: %s", s)
	}
	if Collectable(s, true) {
		t.Errorf("Collectable(self) = true")
	}
}

func TestExitedProcessIsGone(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	self, _ := Parse(Self())
	id := self
	id.PID = cmd.Process.Pid
	s := format(id)
	if !Gone(s) {
		t.Errorf("an exited process is not gone: %s", s)
	}
	if !Collectable(s, false) {
		t.Errorf("an exited process of this uid is not collectable")
	}
	other := id
	other.UID = id.UID + 4242
	if Collectable(format(other), false) || !Collectable(format(other), true) {
		t.Errorf("another uid's leftovers: collectable without --all, or not with it")
	}
}

func TestOutOfSightIsNotGone(t *testing.T) {
	base := ID{Host: "h", Boot: "b", PIDNS: "1", UID: 0, PID: 77, Start: 5}
	noProc := func(int) uint64 { return 0 }
	e := env{host: "h", boot: "b", pidns: "1", start: noProc, alive: func(int) bool { return true }}
	if gone(base, e) {
		t.Error("a process hidden from /proc (hidepid) but alive was taken for gone")
	}
	e.alive = func(int) bool { return false }
	if !gone(base, e) {
		t.Error("a process that neither /proc nor kill finds is not gone")
	}
	e.pidns = "2"
	if gone(base, e) {
		t.Error("a process of another PID namespace was taken for gone")
	}
	e.pidns, e.host = "1", "other"
	if gone(base, e) {
		t.Error("a process of another host was taken for gone")
	}
	e.host, e.boot = "h", "b2"
	if !gone(base, e) {
		t.Error("a process of an earlier boot is not gone")
	}
	e.boot, e.start = "b", func(int) uint64 { return 6 }
	if !gone(base, e) {
		t.Error("a reused PID (other start time) is not gone")
	}
	for _, bad := range []string{"", "h/1/2", "h/b/1/x/2/3", "h/b/1/0/0/3"} {
		if Gone(bad) || Collectable(bad, true) {
			t.Errorf("malformed %q taken for gone", bad)
		}
	}
}

func format(id ID) string {
	return id.Host + "/" + id.Boot + "/" + id.PIDNS + "/" + itoa(id.UID) + "/" + itoa(id.PID) + "/" + itoa(int(id.Start))
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestStartTimeSelf: this process's start time, read once, is what
// /proc says.
func TestStartTimeSelf(t *testing.T) {
	for range 2 {
		if got, want := StartTime(os.Getpid()), readStartTime(os.Getpid()); got != want || got == 0 {
			t.Errorf("StartTime(self) = %d; /proc/self/stat says %d", got, want)
		}
	}
}
