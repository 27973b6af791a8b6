package sandbash_test

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/sandbash/sandbash"
	"github.com/sandbash/sandbash/backend/bwrap"
	"github.com/sandbash/sandbash/internal/fakebackend"
)

// Open a session on bubblewrap for a project directory, run a command in
// it, and show the agent what happened.
func Example() {
	ctx := context.Background()
	b, err := bwrap.New()
	if err != nil {
		fmt.Println(err) // says what to install or change
		return
	}
	s, err := sandbash.Open(ctx, b, sandbash.Config{Workspace: "/home/me/project"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	res, err := s.Run(ctx, sandbash.Request{Command: "go test ./..."})
	if err != nil {
		fmt.Println(err) // refused, or sandbash could not see the call to its end
	}
	if res != nil {
		fmt.Print(res.Observation())
	}
}

// A call's observation: the escaped command, the output, and how it ended.
// (The fake backend here only echoes.)
func ExampleSession_Run() {
	ws, _ := os.MkdirTemp("", "example-")
	defer os.RemoveAll(ws)
	s, err := sandbash.Open(context.Background(), fakebackend.Backend{}, sandbash.Config{Workspace: ws})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	res, _ := s.Run(context.Background(), sandbash.Request{Command: "echo hello"})
	fmt.Print(res.Observation())
	// Output:
	// $ echo hello
	// hello
	// exit status: 0
}

// Refusals run nothing and wrap sentinel errors.
func ExampleCheckRequest() {
	err := sandbash.CheckRequest(sandbash.Request{Command: "  "}, 0)
	fmt.Println(err != nil)
	// Output: true
}

// Dependency caches, copy-on-write: the host's Go module and build caches
// are the read-only lower layer; the session writes to its own.
func Example_caches() {
	caches, err := sandbash.ResolveCaches([]string{"go"}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg := sandbash.Config{Workspace: "/home/me/project", Caches: caches}
	_ = cfg // sandbash.Open(ctx, b, cfg)
}

// yesToEcho approves only commands that start with echo.
type yesToEcho struct{}

func (yesToEcho) Confirm(ctx context.Context, command string) (bool, error) {
	fmt.Printf("asked about: %s\n", sandbash.EscapeCommand(command))
	return strings.HasPrefix(command, "echo "), nil
}

// A session with a confirmer: every command is put to it (escaped) before
// it runs, and a "no" runs nothing.
func ExampleConfirmer() {
	ws, _ := os.MkdirTemp("", "example-")
	defer os.RemoveAll(ws)
	s, err := sandbash.Open(context.Background(), fakebackend.Backend{}, sandbash.Config{Workspace: ws, Confirm: yesToEcho{}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	if _, err := s.Run(context.Background(), sandbash.Request{Command: "rm -rf ~"}); err != nil {
		fmt.Println("refused:", strings.Contains(err.Error(), "not run"))
	}
	res, _ := s.Run(context.Background(), sandbash.Request{Command: "echo ok"})
	fmt.Print(res.Output)
	// Output:
	// asked about: rm -rf ~
	// refused: true
	// asked about: echo ok
	// ok
}
