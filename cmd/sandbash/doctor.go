package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sandbash/sandbash/backend"
	container "github.com/sandbash/sandbash/internal/ctrbackend"
)

const doctorUsage = `Usage: sandbash doctor [--namespace NAMESPACE] [--claim NAME:ROOT]

Checks every backend on this host and says, for each, whether it can run
sandboxes and why not. Exits 0 when at least one backend works. For
Kubernetes (the cluster found as kubectl finds it), it says which cluster,
context and namespace, which permissions are missing there
(SelfSubjectAccessReview), and whether the claim (--claim, or, when
sandbash runs in a pod, the claim the pod mounts where the working
directory is) and the RuntimeClass without network are usable.
`

func doctorCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, doctorUsage) }
	namespace := fs.String("namespace", "", "kubernetes: the namespace to check")
	claim := fs.String("claim", "", "kubernetes: the workspace's claim to check, NAME:ROOT or ROOT")
	if ok, code := parseFlags(fs, args); !ok {
		return code
	}
	// Every backend is visited: the build with Kubernetes does it, if
	// installed.
	if err := handToKubernetesBuild(); err != nil {
		fmt.Fprintln(stderr, "sandbash doctor: "+err.Error())
		return 1
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sandbash: unexpected argument %q\n\n%s", fs.Arg(0), doctorUsage)
		return 2
	}
	// working: the backends --backend auto may pick (never kubernetes);
	// someWorks: whether any backend at all works here.
	var working []string
	someWorks := false
	report := func(name, line string, ok, auto bool) {
		state := "unavailable"
		if ok {
			state = "available"
			someWorks = true
			if auto {
				working = append(working, name)
			}
		}
		fmt.Fprintf(stdout, "%-7s %s: %s\n", name+":", state, line)
	}
	for _, c := range allBackends() {
		line, ok := doctorLine(ctx, c)
		report(c.name, line, ok, true)
	}
	wd, _ := os.Getwd() // in a pod, the claim behind the working directory
	line, ok := kubernetesDoctor(ctx, *namespace, *claim, wd)
	report("kubernetes", line, ok, false)
	fmt.Fprintf(stdout, "usable: %s\n", usableLine(working))
	fmt.Fprintf(stdout, "uids:   %s\n", identityLine(os.Geteuid()))
	if !someWorks {
		fmt.Fprintln(stderr, "sandbash: no backend works here; each line above says why, and what to install or change")
		return 1
	}
	return 0
}

// usableLine says which backends work, and what --backend auto picks.
func usableLine(working []string) string {
	switch {
	case len(working) == 0:
		return "none"
	case working[0] != "bwrap":
		return fmt.Sprintf("%s; --backend auto uses %s when given an image (--image, SANDBASH_IMAGE or devcontainer.json), and refuses without one, as bwrap cannot work here", strings.Join(working, ", "), working[0])
	case len(working) == 1:
		return "bwrap; --backend auto uses it"
	}
	return fmt.Sprintf("%s; --backend auto uses %s when given an image (--image, SANDBASH_IMAGE or devcontainer.json), else bwrap", strings.Join(working, ", "), working[1])
}

// identityLine says who calls run as, which never is host root.
func identityLine(euid int) string {
	if euid == 0 {
		return fmt.Sprintf("calls run as the workspace owner; a root-owned workspace's calls run as uid %d:%d, seeing it through idmapped mounts (files they create belong to root; no call holds host uid 0); every mount is staged in /run/sandbash, nosuid, nodev", backend.SandboxUID, backend.SandboxGID)
	}
	return fmt.Sprintf("calls run as you (uid %d) on bwrap and as the workspace owner on container engines; a root-owned workspace is refused on container engines (only a root sandbash can map it)", euid)
}

// doctorLine opens the backend with the default limits and says what it
// runs on (backend.Informer), or why it cannot run.
func doctorLine(ctx context.Context, c namedBackend) (string, bool) {
	b, err := c.open(ctx, containerOptions{limits: container.DefaultLimits(), progress: io.Discard})
	if err != nil {
		return err.Error(), false
	}
	defer b.Close()
	in, ok := b.(backend.Informer)
	if !ok {
		return "works; it describes nothing more", true
	}
	info, err := in.Info(ctx)
	if err != nil {
		return err.Error(), false
	}
	var line strings.Builder
	line.WriteString(info.Summary)
	for _, d := range info.Details {
		line.WriteString("\n        " + d)
	}
	return line.String(), true
}
