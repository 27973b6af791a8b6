//go:build containers_image_openpgp

package integration

// buildTags builds the CLI under test with the podman backend, as this test
// binary was built.
const buildTags = "containers_image_openpgp,exclude_graphdriver_btrfs"
