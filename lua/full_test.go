package lua_test

import (
	"testing"

	"github.com/pacer-go/pacer/internal/redistest"
)

// TestScriptsRefusedWholeWhenFull runs every conformance test under
// redistest's FullCheck: each script call that would add memory is made on
// a full Redis too (maxmemory, noeviction), where it must fail with OOM and
// change none of its keys (docs/protocol.md, "A full Redis").
// TestConformanceFairLapsed is the case of the combination runner's seed
// 16: fair.lua dropped a tenant whose waiting had lapsed (a removal, which
// a full Redis lets through) before it booked, so a full Redis let the
// whole call through.
func TestScriptsRefusedWholeWhenFull(t *testing.T) {
	f := redistest.NewFullCheck(t)
	for _, run := range []struct {
		name string
		test func(*testing.T)
	}{
		{"Spacing", TestConformanceSpacing}, {"Formats", TestConformanceFormats},
		{"Window", TestConformanceWindow}, {"Cancel", TestConformanceCancel},
		{"AdjustNewLineage", TestConformanceAdjustNewLineage}, {"Pause", TestConformancePause},
		{"LostHorizon", TestConformanceLostHorizon}, {"Stale", TestConformanceStale},
		{"BadArguments", TestConformanceBadArguments}, {"NaN", TestConformanceNaN},
		{"WrongType", TestConformanceWrongType}, {"Format3", TestConformanceFormat3},
		{"HeartbeatOrder", TestConformanceHeartbeatOrder}, {"Heartbeat", TestConformanceHeartbeat},
		{"Calendar", TestConformanceCalendar}, {"FairGroups", TestConformanceFairGroups},
		{"PlainRequests", TestConformancePlainRequests}, {"FairLapsed", TestConformanceFairLapsed}, {"ClaimStale", TestConformanceClaimStale},
		{"ProtocolDoc", TestProtocolDoc},
	} {
		f.Run(t, run.name, run.test)
	}
	f.Report(t)
}
