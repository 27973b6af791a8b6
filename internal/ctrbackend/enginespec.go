package ctrbackend

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/internal/hostpath"
)

// engineSpec is sp as the engine is to see it, a copy (sp itself, which
// the session checks its paths with, is unchanged): when sandbash runs in
// a container (cfg.HostPaths), every host path it names (mount sources, /tmp, HOME,
// the session's directory, the caches' layers) as the engine's host
// knows it. A path no mount from the engine's host holds is refused.
func engineSpec(sp *backend.SessionSpec, cfg Config) (*backend.SessionSpec, error) {
	es := *sp
	es.Mounts = slices.Clone(sp.Mounts)
	es.Overlays = slices.Clone(sp.Overlays)
	hp := cfg.HostPaths
	if hp == nil {
		return &es, nil
	}
	var err error
	host := func(p *string) {
		if err != nil || *p == "" || *p == "/dev/null" {
			return
		}
		*p, err = hp.Host(*p)
	}
	for i := range es.Mounts {
		host(&es.Mounts[i].Source)
	}
	if err != nil {
		return nil, err
	}
	host(&es.TmpDir)
	host(&es.HomeDir)
	host(&es.Dir)
	if err != nil {
		return nil, fmt.Errorf("the session's directory, which holds its /tmp and HOME: %w; so must it be: set XDG_STATE_HOME (the CLI) or Config.ParentDir to a directory there", err)
	}
	for i := range es.Overlays {
		o := &es.Overlays[i]
		o.Layers = slices.Clone(o.Layers)
		host(&o.Lower)
		host(&o.Upper)
		host(&o.Work)
		for j := range o.Layers {
			host(&o.Layers[j])
		}
	}
	if err != nil {
		return nil, err
	}
	return &es, nil
}

// HostPathsLine says, for `sandbash doctor`, how paths reach the engine.
func HostPathsLine(m *hostpath.Map) string {
	if m == nil {
		return "the engine mounts paths as sandbash sees them (sandbash runs on the engine's host, or in no container the engine knows)"
	}
	var ms []string
	for _, mt := range m.Mounts() {
		ms = append(ms, mt.Destination+" = host "+mt.Source)
	}
	return fmt.Sprintf("sandbash runs in container %.12s of this engine: the workspace, extra paths, caches and session directories must be on its mounts from the host, which sandbash gives the engine as host paths (%s); mounts are not staged in /run/sandbash, and egress rules are refused", m.ID, strings.Join(ms, ", "))
}

// Unstaged says why the engine cannot see mounts sandbash stages (package
// internal/hostmount clones them in its own mount namespace): sandbash
// runs in a container, the engine outside it. "" when it can.
func (b *Backend) Unstaged() string {
	if b.cfg.HostPaths == nil {
		return ""
	}
	return fmt.Sprintf("sandbash runs in container %.12s and the %s engine outside it, which cannot see the mounts sandbash would stage in there", b.cfg.HostPaths.ID, b.engine.Name())
}
