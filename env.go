package sandbash

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sandbash/sandbash/backend"
)

// basePath is PATH inside every sandbox.
const basePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// buildEnv returns a call's environment: the minimal base, then each
// passthrough entry ("NAME" copied via lookup, or "NAME=VALUE"), later
// entries overriding earlier ones.
func buildEnv(pass []string, lookup func(string) (string, bool)) ([]string, error) {
	names := []string{"PATH", "HOME", "LANG", "TERM"}
	vals := map[string]string{"PATH": basePath, "HOME": backend.Home, "LANG": "C.UTF-8", "TERM": "dumb"}
	for _, e := range pass {
		name, val, hasVal := strings.Cut(e, "=")
		if !validName(name) {
			return nil, fmt.Errorf("sandbash: --env %q: %q is not a variable name (letters, digits and _, not starting with a digit): %w", e, name, ErrBadEnv)
		}
		if !hasVal {
			v, ok := lookup(name)
			if !ok {
				return nil, fmt.Errorf("sandbash: --env %s: %s is not set here; set it, or give a value with --env %s=VALUE: %w", name, name, name, ErrBadEnv)
			}
			val = v
		}
		if strings.IndexByte(val, 0) >= 0 {
			return nil, fmt.Errorf("sandbash: --env %s: the value contains a NUL byte: %w", name, ErrBadEnv)
		}
		if _, seen := vals[name]; !seen {
			names = append(names, name)
		}
		vals[name] = val
	}
	env := make([]string, 0, len(names))
	for _, n := range names {
		env = append(env, n+"="+vals[n])
	}
	return env, nil
}

func validName(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	return !slices.ContainsFunc([]byte(s), func(c byte) bool {
		return !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9')
	})
}
