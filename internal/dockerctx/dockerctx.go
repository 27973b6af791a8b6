// Package dockerctx finds the Docker endpoint the docker CLI's current
// context names, for the Docker backend (to connect to it) and the mount
// policy (to refuse mounting its socket).
package dockerctx

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Current returns the name and docker endpoint (unix:///..., tcp://...) of
// the context in use: DOCKER_CONTEXT, else the CLI config's currentContext.
// For the default context it returns "", "", nil: the endpoint is then
// DOCKER_HOST or the default socket.
func Current() (name, host string, err error) {
	dir := os.Getenv("DOCKER_CONFIG")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", "", nil
		}
		dir = filepath.Join(home, ".docker")
	}
	name = os.Getenv("DOCKER_CONTEXT")
	if name == "" {
		var cfg struct {
			CurrentContext string `json:"currentContext"`
		}
		if b, err := os.ReadFile(filepath.Join(dir, "config.json")); err == nil {
			_ = json.Unmarshal(b, &cfg)
		}
		name = cfg.CurrentContext
	}
	if name == "" || name == "default" {
		return "", "", nil
	}
	sum := sha256.Sum256([]byte(name))
	meta := filepath.Join(dir, "contexts", "meta", hex.EncodeToString(sum[:]), "meta.json")
	b, err := os.ReadFile(meta)
	if err != nil {
		return name, "", fmt.Errorf("docker context %q: cannot read %s (%v); list contexts with `docker context ls`", name, meta, err)
	}
	var m struct {
		Endpoints map[string]struct {
			Host string `json:"Host"`
		} `json:"Endpoints"`
	}
	if err := json.Unmarshal(b, &m); err != nil || m.Endpoints["docker"].Host == "" {
		return name, "", fmt.Errorf("docker context %q: %s has no docker endpoint", name, meta)
	}
	return name, m.Endpoints["docker"].Host, nil
}
