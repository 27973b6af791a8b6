package bwrap_test

import (
	"testing"

	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/backend/backendtest"
	"github.com/sandbash/sandbash/backend/bwrap"
)

func TestConformance(t *testing.T) {
	b, err := bwrap.New()
	if err != nil {
		backendtest.Unavailable(t, "bwrap", err)
	}
	backendtest.Run(t, func(*testing.T) backend.Backend { return b }, backendtest.Capabilities{HostLoopback: true})
}
