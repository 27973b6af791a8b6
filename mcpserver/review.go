package mcpserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandbash/sandbash"
)

// Sandbox is where a connection's calls run: a *sandbash.Session, or
// anything that runs calls as one does.
type Sandbox interface {
	Run(ctx context.Context, req sandbash.Request) (*sandbash.Result, error)
	Close() error
}

// Reviewer is what the workspace tool asks of a sandbox whose workspace
// is in overlay mode (*sandbash.Session is one). It has no Apply: applying
// the agent's changes to the host is the user's decision, made with the
// CLI or the library, never the agent's.
type Reviewer interface {
	Diff(ctx context.Context, paths ...string) (*sandbash.Changes, error)
	Checkpoint(ctx context.Context, name string) error
	Restore(ctx context.Context, name string) error
	Checkpoints() ([]sandbash.Checkpoint, error)
}

var (
	_ Sandbox  = (*sandbash.Session)(nil)
	_ Reviewer = (*sandbash.Session)(nil)
)

// open opens a new connection's sandbox.
func (s *Server) open(ctx context.Context) (Sandbox, error) {
	if s.opt.OpenSandbox != nil {
		return s.opt.OpenSandbox(ctx)
	}
	if s.opt.Open == nil {
		return nil, errors.New("the server has no way to open a sandbox")
	}
	sess, err := s.opt.Open(ctx)
	if err != nil {
		return nil, err
	}
	return sess, nil
}

// WorkspaceInput is the workspace tool's input.
type WorkspaceInput struct {
	Action string   `json:"action" jsonschema:"checkpoint (save the workspace as it is now under name), restore (bring the workspace back to the checkpoint name; what changed since is discarded), diff (what you changed, not yet applied; paths narrows it, stat gives one line per file) or list (the checkpoints)"`
	Name   string   `json:"name,omitempty" jsonschema:"the checkpoint's name, for checkpoint and restore: letters, digits, '.', '_', '-'"`
	Paths  []string `json:"paths,omitempty" jsonschema:"for diff: only changes within these paths, relative to the workspace"`
	Stat   bool     `json:"stat,omitempty" jsonschema:"for diff: one line per changed file instead of the unified diff"`
}

// maxDiff bounds the diff the tool returns.
const maxDiff = 48 << 10

func (s *Server) addWorkspaceTool() {
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:  "workspace",
		Title: "Checkpoint, restore or diff the workspace",
		Description: strings.TrimSpace(`Manages your changes to the workspace. Your commands do not change the user's files directly: everything they write stays in this session until the user reviews and applies it (you cannot apply).
- checkpoint NAME: save the workspace as it is now (cheap; take one before a risky step).
- restore NAME: bring the workspace back to checkpoint NAME, discarding what changed since.
- diff: show what you changed so far, as a unified diff (paths to narrow it, stat for a summary).
- list: the checkpoints.`),
	}, s.workspace)
}

func (s *Server) workspace(ctx context.Context, req *mcp.CallToolRequest, in WorkspaceInput) (*mcp.CallToolResult, any, error) {
	c, err := s.conn(ctx, req.Session)
	if err != nil {
		return errorResult("the sandbox could not be opened: %v", err), nil, nil
	}
	r, ok := c.s.(Reviewer)
	if !ok {
		return errorResult("this sandbox's workspace is not reviewable (it is not in overlay mode)"), nil, nil
	}
	text := func(t string) *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: t}}}
	}
	switch in.Action {
	case "checkpoint":
		if err := r.Checkpoint(ctx, in.Name); err != nil {
			return errorResult("checkpoint failed: %v", err), nil, nil
		}
		return text("checkpoint " + in.Name + " saved"), nil, nil
	case "restore":
		if err := r.Restore(ctx, in.Name); err != nil {
			return errorResult("restore failed: %v", err), nil, nil
		}
		return text("the workspace is back at checkpoint " + in.Name), nil, nil
	case "list":
		cps, err := r.Checkpoints()
		if err != nil {
			return errorResult("listing the checkpoints failed: %v", err), nil, nil
		}
		if len(cps) == 0 {
			return text("no checkpoints yet"), nil, nil
		}
		var b strings.Builder
		for _, cp := range cps {
			fmt.Fprintf(&b, "%s (%s)\n", cp.Name, cp.Created.Format("2006-01-02 15:04:05 MST"))
		}
		return text(b.String()), nil, nil
	case "diff":
		cs, err := r.Diff(ctx, in.Paths...)
		if err != nil {
			return errorResult("diff failed: %v", err), nil, nil
		}
		var b bytes.Buffer
		if in.Stat {
			err = cs.WriteStat(&b)
		} else {
			err = cs.WritePatch(&b)
		}
		if err != nil {
			return errorResult("diff failed: %v", err), nil, nil
		}
		out := b.String()
		if len(out) > maxDiff {
			out = out[:maxDiff] + fmt.Sprintf("\n[diff truncated: %d of %d bytes shown; narrow it with paths, or ask for stat]\n", maxDiff, b.Len())
		}
		if len(cs.List) == 0 {
			out = "no changes: the workspace is as on the host\n"
		}
		return text(out), nil, nil
	}
	return errorResult("unknown action %q: use checkpoint, restore, diff or list", in.Action), nil, nil
}
