package backendtest

import (
	"github.com/sandbash/sandbash"
)

// testCommandNotInHostArgv: while a call runs, no process on the host
// (the sandbox's included: they are host processes, and every user can
// read their command lines with ps) has the command in its argv.
func testCommandNotInHostArgv(f *fixture) {
	s := f.open(sandbash.Config{})
	secret := marker()
	stop := f.startLong(s, "secret="+secret+"; echo started; sleep 60; :")
	defer stop()
	if found := processesWith(secret); len(found) > 0 {
		f.t.Errorf("the command is in the argv of host processes, for every user's ps to see: %v", found)
	}
}
