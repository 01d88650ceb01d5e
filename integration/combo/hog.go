package combo

import (
	"context"
	"fmt"
	"time"
)

// CPU hogs (FaultHog): processes that each keep one CPU busy beside the
// fleet, as cmd/pacerbench's busy phase runs them, so that the fleet's
// processes, the provider and Redis get their CPU late: a loaded machine,
// which must not look like an outage (DESIGN.md, "Redis down").

// hogRecovery: the time after CPU hogs, or a process's stop, in which its
// callers may still be late.
const hogRecovery = time.Second

// loadedDuring reports whether CPU hogs ran, or a process was stopped
// (child's, or any if child is ""), at any time in [a, b] (with
// hogRecovery after).
func (r *run) loadedDuring(child string, a, b int64) bool {
	for _, x := range r.res.Actions {
		if x.Kind != FaultHog && !(x.Kind == FaultStall && (child == "" || x.Child == child)) {
			continue
		}
		if x.At <= b && a <= max(x.End, x.At)+int64(hogRecovery) {
			return true
		}
	}
	return false
}

// startHogs starts n hogs; the caller kills them. A hog that does not
// start stops those started.
func startHogs(ctx context.Context, n int, args []string) ([]*proc, error) {
	var hogs []*proc
	for i := range n {
		p, err := startProc(ctx, fmt.Sprintf("hog-%d", i), hogEnv, struct{}{}, args)
		if err != nil {
			for _, h := range hogs {
				h.kill()
			}
			return nil, fmt.Errorf("starting a CPU hog: %w", err)
		}
		hogs = append(hogs, p)
	}
	return hogs, nil
}
