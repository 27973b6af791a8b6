package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/sandbash/sandbash"
)

// terminalConfirmer asks on the controlling terminal, so it works even when
// stdin and stdout are redirected.
type terminalConfirmer struct{}

func (terminalConfirmer) Confirm(ctx context.Context, command string) (bool, error) {
	tty, err := os.OpenFile("/dev/tty", os.O_RDWR, 0)
	if err != nil {
		return false, fmt.Errorf("--confirm needs a terminal to ask on, and there is none (%v); run without --confirm or from a terminal", err)
	}
	defer tty.Close()
	fmt.Fprintf(tty, "sandbash: run this command?\n  $ %s\n[y/N] ", strings.ReplaceAll(sandbash.EscapeCommand(command), "\n", "\n    "))
	answer := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(tty).ReadString('\n')
		answer <- line
	}()
	select {
	case <-ctx.Done():
		return false, ctx.Err()
	case line := <-answer:
		a := strings.ToLower(strings.TrimSpace(line))
		return a == "y" || a == "yes", nil
	}
}
