package mcpserver

import "time"

// SetClock makes s tell time by now (approvals expire by it).
func SetClock(s *Server, now func() time.Time) { s.now = now }
