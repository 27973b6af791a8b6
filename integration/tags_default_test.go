//go:build !containers_image_openpgp

package integration

const buildTags = ""
