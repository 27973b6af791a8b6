package integration

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/moby/moby/client"

	"github.com/sandbash/sandbash/backend/backendtest"
	"github.com/sandbash/sandbash/backend/container"
	"github.com/sandbash/sandbash/backend/docker"
)

const testImage = "sandbash-test:latest"

func newDockerCLI(t *testing.T) *cli {
	t.Helper()
	b, err := docker.New(context.Background())
	if err != nil {
		backendtest.Unavailable(t, "docker", err)
	}
	b.Close()
	if out, err := exec.Command("docker", "image", "inspect", testImage).CombinedOutput(); err != nil {
		backendtest.Unavailable(t, "docker", errorf("test image %s missing (make images): %s", testImage, out))
	}
	return newCLI(t)
}

// sandbashObjects lists the sandbash-labelled containers and volumes owned
// by the process with PID pid (other test packages run alongside).
func sandbashObjects(t *testing.T, pid int) []string {
	t.Helper()
	cli, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	f := make(client.Filters).Add("label", container.LabelSession)
	cs, err := cli.ContainerList(context.Background(), client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	vs, err := cli.VolumeList(context.Background(), client.VolumeListOptions{Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	mine := func(labels map[string]string) bool {
		return strings.Contains(labels[container.LabelOwner], fmt.Sprintf("/%d/", pid))
	}
	var out []string
	for _, c := range cs.Items {
		if mine(c.Labels) {
			out = append(out, "container "+c.ID[:12]+" "+string(c.State))
		}
	}
	for _, v := range vs.Items {
		if mine(v.Labels) {
			out = append(out, "volume "+v.Name)
		}
	}
	return out
}

func TestDockerRunsAsWorkspaceOwner(t *testing.T) {
	c := newDockerCLI(t)
	want := "4242"
	if os.Getuid() != 0 {
		want = strings.TrimSpace(mustOutput(t, "id", "-u"))
	} else if err := os.Chown(c.dir, 4242, 4242); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := c.run("run", "--backend", "docker", "--image", testImage, "--", "id -u")
	if code != 0 || strings.TrimSpace(out) != want {
		t.Errorf("id -u: %q (exit %d, %s), want %s", out, code, errOut, want)
	}
}

func TestDockerImageSources(t *testing.T) {
	c := newDockerCLI(t)
	// No image anywhere: a clear error that says how to give one.
	_, errOut, code := c.run("run", "--backend", "docker", "--", "true")
	if code != 125 || !strings.Contains(errOut, "--image") || !strings.Contains(errOut, "SANDBASH_IMAGE") {
		t.Errorf("no image: exit %d, %s", code, errOut)
	}
	// An image that is not here and cannot be pulled.
	_, errOut, code = c.run("run", "--backend", "docker", "--image", "sandbash-no-such-image:1", "--", "touch ran")
	if code != 125 || !strings.Contains(errOut, "pulling it failed") {
		t.Errorf("missing image: exit %d, %s", code, errOut)
	}
	// devcontainer.json, with comments and a trailing comma.
	dc := filepath.Join(c.dir, ".devcontainer")
	os.Mkdir(dc, 0o755)
	os.WriteFile(filepath.Join(dc, "devcontainer.json"), []byte("{\n  // test image\n  \"image\": \""+testImage+"\",\n}\n"), 0o644)
	out, errOut, code := c.run("run", "--", "test -x /bin/busybox && echo in-image")
	if code != 0 || out != "in-image\n" || !strings.Contains(errOut, "devcontainer.json") {
		t.Errorf("devcontainer image: exit %d, %q, %s", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(c.dir, "ran")); err == nil {
		t.Error("a call ran although its image was missing")
	}
}

// TestDockerGCAfterKill kills the CLI mid-call, so nothing of it cleans up;
// gc must then leave no sandbash container or volume behind.
func TestDockerGCAfterKill(t *testing.T) {
	c := newDockerCLI(t)
	cmd := c.cmd("run", "--backend", "docker", "--image", testImage, "--", "echo ready; sleep 300")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("read %q, %v", line, err)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	pid := cmd.Process.Pid
	if left := sandbashObjects(t, pid); len(left) == 0 {
		t.Fatal("nothing was left to collect: the test proves nothing")
	}
	out, errOut, code := c.run("gc")
	if code != 0 {
		t.Fatalf("gc: exit %d: %s %s", code, out, errOut)
	}
	if left := sandbashObjects(t, pid); len(left) > 0 {
		t.Errorf("after gc: %v (gc said %q)", left, out)
	}
}

func mustOutput(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}
