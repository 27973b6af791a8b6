package main

import (
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestLibraryNamesNoFlags keeps the CLI's flags out of what the library
// says: a library caller has no flags, so the library names settings and
// flagHints adds the flag here. It reads every string literal of the
// module's non-test code outside this command and the packages only it
// uses, and fails on one that names a session flag as --NAME.
func TestLibraryNamesNoFlags(t *testing.T) {
	set := flag.NewFlagSet("run", flag.ContinueOnError)
	new(sessionFlags).register(set)
	var flags []string
	set.VisitAll(func(f *flag.Flag) { flags = append(flags, "--"+f.Name) })
	if len(flags) < 10 {
		t.Fatalf("found only %d session flags: %v", len(flags), flags)
	}
	// The CLI's own packages may name its flags.
	cliOnly := []string{"cmd", "integration", "internal/devcontainer", "mcpserver", "scripts"}
	root, _ := filepath.Abs("../..")
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			for _, c := range cliOnly {
				if rel == c || strings.HasPrefix(d.Name(), ".") && rel != "." {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		checked++
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || !isErrorMaker(call.Fun) {
				return true
			}
			for _, a := range call.Args {
				lit, ok := a.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				s, _ := strconv.Unquote(lit.Value)
				for _, fl := range flags {
					if i := strings.Index(s, fl); i >= 0 && !isWordChar(s, i+len(fl)) {
						t.Errorf("%s: an error names the CLI flag %s: %q; name the setting, and add the flag to flagHints", rel, fl, s)
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 20 {
		t.Fatalf("checked only %d files under %s", checked, root)
	}
}

func isErrorMaker(fun ast.Expr) bool {
	sel, ok := fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	x, ok := sel.X.(*ast.Ident)
	return ok && (x.Name == "fmt" && sel.Sel.Name == "Errorf" || x.Name == "errors" && sel.Sel.Name == "New")
}

func isWordChar(s string, i int) bool {
	if i >= len(s) {
		return false
	}
	c := s[i]
	return c == '-' || c == '_' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9'
}
