package reserve_test

import (
	"testing"

	"github.com/pacer-go/pacer/internal/redistest"
)

// TestScriptsRefusedWholeWhenFull runs tests of fair turns, settles,
// cancels and seats under redistest's FullCheck: each script call that
// would add memory is made on a full Redis too (maxmemory, noeviction),
// where it must fail with OOM and change none of its keys
// (docs/protocol.md, "A full Redis"). Seats drop gone holders, and
// adjust.lua deletes a hold and moves a tenant's pass, before they add.
func TestScriptsRefusedWholeWhenFull(t *testing.T) {
	f := redistest.NewFullCheck(t)
	for _, run := range []struct {
		name string
		test func(*testing.T)
	}{
		{"FairSettleReachesTurns", TestFairSettleReachesTurns},
		{"SeatsInOrder", TestSeatsInOrder},
		{"SeatsTryAndCancel", TestSeatsTryAndCancel},
		{"SeatsWithRate", TestSeatsWithRate},
	} {
		f.Run(t, run.name, run.test)
	}
	calls, adding, whole := f.Counts()
	t.Logf("%d script calls checked; %d of them add with room: %d were refused whole when full, %d are leaves and unsets", calls, adding, adding-whole, whole)
	if adding-whole == 0 {
		t.Error("no script call added anything: the check checked nothing")
	}
}
