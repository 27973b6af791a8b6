package sandbash

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/sandbash/sandbash/backend"
)

// basePath is PATH inside every sandbox.
const basePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Variables that change how bash or the dynamic linker start. Passed with
// Config.Env they would act before the command, on everything the call
// starts (and, were a sandbox's own startup to see them, on that too), so
// they are refused: a command sets them itself. Names are compared
// ignoring case.
var (
	// bashStartup change what bash runs or how it parses before the
	// command: startup files, options, tracing, word splitting, exported
	// functions.
	bashStartup = []string{"BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "BASH_XTRACEFD", "PS4", "PROMPT_COMMAND", "IFS", "CDPATH", "GLOBIGNORE"}
	// linkerStartup change what the dynamic linker and the C library load
	// into every program: LD_* (LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT, ...),
	// tunables, and the directories of iconv modules and locales.
	linkerStartup = []string{"GCONV_PATH", "GLIBC_TUNABLES", "LOCPATH"}
)

// CheckEnv refuses Config.Env entries that Open would refuse for their
// form: a name that is not a variable name, one that changes how bash or
// the dynamic linker start (wrapping ErrUnsafeEnv), a value with a NUL byte.
// Whether a "NAME" entry is set here is checked by Open.
func CheckEnv(entries []string) error {
	for _, e := range entries {
		if err := checkEntry(e); err != nil {
			return err
		}
	}
	return nil
}

func checkEntry(e string) error {
	name, val, _ := strings.Cut(e, "=")
	if !validName(name) {
		return fmt.Errorf("sandbash: environment entry %q: %q is not a variable name (letters, digits and _, not starting with a digit): %w", e, name, ErrBadEnv)
	}
	if strings.IndexByte(val, 0) >= 0 {
		return fmt.Errorf("sandbash: environment variable %s: the value contains a NUL byte: %w", name, ErrBadEnv)
	}
	why, instead := startupVar(strings.ToUpper(name))
	if why == "" {
		return nil
	}
	if w, _ := startupVar(name); w == "" {
		why += " (names are compared ignoring case)"
	}
	return fmt.Errorf("sandbash: environment variable %s: refused: %s; %s: %w", name, why, instead, ErrUnsafeEnv)
}

// startupVar says why name changes how the sandbox starts, and what to do
// instead; "" if it does not.
func startupVar(name string) (why, instead string) {
	switch {
	case name == "PATH":
		return "set from outside, PATH would apply before your command, to the programs that start it",
			"set it inside the command instead: export PATH=DIR:$PATH; COMMAND"
	case strings.HasPrefix(name, "BASH_FUNC_"):
		return "it would import a shell function into bash before your command, which can replace any command or builtin",
			"define the function inside the command instead: f() { ...; }; COMMAND"
	case slices.Contains(bashStartup, name):
		return "it changes how bash starts (files it runs, options, tracing, parsing) before your command",
			"set it inside the command instead: export " + name + "=VALUE; COMMAND"
	case strings.HasPrefix(name, "LD_") || slices.Contains(linkerStartup, name):
		return "it changes what the dynamic linker loads into every program of the call, bash included, before your command",
			"set it inside the command instead: " + name + "=VALUE PROGRAM (for one program) or export " + name + "=VALUE; COMMAND"
	}
	return "", ""
}

// ResolveEnv checks Config.Env entries as Open does and returns them as
// NAME=VALUE: a "NAME" entry takes NAME's value from this process's
// environment, where it must be set. A session that outlives this process
// (the CLI's) resolves its entries once, with this, when it opens.
func ResolveEnv(entries []string) ([]string, error) {
	return resolveEnv(entries, os.LookupEnv)
}

// resolveEnv is ResolveEnv with lookup standing for the environment.
func resolveEnv(entries []string, lookup func(string) (string, bool)) ([]string, error) {
	out := make([]string, 0, len(entries))
	for _, e := range entries {
		if err := checkEntry(e); err != nil {
			return nil, err
		}
		if !strings.Contains(e, "=") {
			v, ok := lookup(e)
			if !ok {
				return nil, fmt.Errorf("sandbash: environment variable %s: it is not set in sandbash's own environment; set it, or give its value as %s=VALUE: %w", e, e, ErrBadEnv)
			}
			if strings.IndexByte(v, 0) >= 0 {
				return nil, fmt.Errorf("sandbash: environment variable %s: the value contains a NUL byte: %w", e, ErrBadEnv)
			}
			e += "=" + v
		}
		out = append(out, e)
	}
	return out, nil
}

// buildEnv returns a call's environment: the minimal base, then each
// passthrough entry (resolved by resolveEnv), later entries overriding
// earlier ones.
func buildEnv(pass []string, lookup func(string) (string, bool)) ([]string, error) {
	pass, err := resolveEnv(pass, lookup)
	if err != nil {
		return nil, err
	}
	names := []string{"PATH", "HOME", "LANG", "TERM"}
	vals := map[string]string{"PATH": basePath, "HOME": backend.Home, "LANG": "C.UTF-8", "TERM": "dumb"}
	for _, e := range pass {
		name, val, _ := strings.Cut(e, "=")
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
