package ctrbackend

// HoldRemovals marks a container preparation under way on b until the
// returned function is called: b's held exits and removals (see [Later])
// wait meanwhile, up to LaterDelay.
func HoldRemovals(b *Backend) (release func()) { return b.later.Busy() }
