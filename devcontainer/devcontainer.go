// Package devcontainer reads the container image a workspace declares in its
// devcontainer.json (https://containers.dev), which is JSON with comments and
// trailing commas.
package devcontainer

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/tailscale/hujson"
)

// ErrNoImage means the workspace declares no image: no devcontainer.json, or
// one without an "image".
var ErrNoImage = errors.New("no devcontainer image")

// Files are where a devcontainer.json may be, relative to the workspace, in
// the order they are looked at.
var Files = []string{".devcontainer/devcontainer.json", ".devcontainer.json"}

// Image returns the "image" of the workspace's devcontainer.json and the file
// it came from.
func Image(workspace string) (image, file string, err error) {
	for _, f := range Files {
		path := filepath.Join(workspace, f)
		b, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", path, fmt.Errorf("devcontainer: %w", err)
		}
		std, err := hujson.Standardize(b)
		if err != nil {
			return "", path, fmt.Errorf("devcontainer: %s is not valid JSON with comments: %v", path, err)
		}
		var doc struct {
			Image         string         `json:"image"`
			Build         map[string]any `json:"build"`
			DockerFile    string         `json:"dockerFile"`
			DockerCompose any            `json:"dockerComposeFile"`
		}
		if err := json.Unmarshal(std, &doc); err != nil {
			return "", path, fmt.Errorf("devcontainer: %s: %v", path, err)
		}
		switch {
		case doc.Image != "":
			return doc.Image, path, nil
		case doc.Build != nil || doc.DockerFile != "" || doc.DockerCompose != nil:
			return "", path, fmt.Errorf("devcontainer: %s builds its image (build, dockerFile or dockerComposeFile) instead of naming one; build it and pass the image with --image or SANDBASH_IMAGE: %w", path, ErrNoImage)
		}
		return "", path, fmt.Errorf("devcontainer: %s names no \"image\": %w", path, ErrNoImage)
	}
	return "", "", ErrNoImage
}
