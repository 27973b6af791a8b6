package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/backend/container"
)

const gcUsage = `Usage: sandbash gc

Removes every sandbash-labelled container and volume whose owning sandbash
process is gone (killed mid-call, say), on each container backend that
answers. What live sandbash processes own is left alone. 'sandbash run' does
the same in the background each time it starts.
`

func gcCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if ok, code := noArgs(args, gcUsage, stdout, stderr); !ok {
		return code
	}
	failed := false
	for _, c := range containerBackends {
		b, err := c.open(ctx, containerOptions{limits: container.DefaultLimits(), progress: io.Discard})
		if err != nil {
			if !errors.Is(err, backend.ErrUnavailable) {
				fmt.Fprintf(stderr, "sandbash gc: %s: %v\n", c.name, err)
				failed = true
			}
			continue
		}
		removed, err := b.(collector).GC(ctx)
		if cl, ok := b.(io.Closer); ok {
			cl.Close()
		}
		for _, r := range removed {
			fmt.Fprintf(stdout, "%s: removed %s\n", c.name, r)
		}
		if err != nil {
			fmt.Fprintf(stderr, "sandbash gc: %s: %v\n", c.name, err)
			failed = true
		}
		fmt.Fprintf(stdout, "%s: %d removed\n", c.name, len(removed))
	}
	if failed {
		return 1
	}
	return 0
}
