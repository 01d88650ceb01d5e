package reserve

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestHandbackMergeKeepsWindows: a handback that failed and one taken after
// it merge window by window. Before, a later window replaced an earlier
// one of the same band, and the earlier one's units, which Redis still
// counts in while it is current, were lost (TestHandbackKeepsFullWindow's
// case, through a failed call); now each window is kept, units of one
// window add up, and only past maxHandWindows of one band is the earliest
// dropped.
func TestHandbackMergeKeepsWindows(t *testing.T) {
	h := &handback{last: 5, windows: []windowUnits{{"win", 30, 2}, {"day", 7, 1}}}
	h = h.merge(&handback{last: 9, windows: []windowUnits{{"win", 30, 1}, {"win", 31, 2}}})
	assert.Equal(t, int64(9), h.last)
	assert.ElementsMatch(t, []windowUnits{{"win", 30, 3}, {"day", 7, 1}, {"win", 31, 2}}, h.windows)
	assert.Equal(t, "0 day:7:1 win:30:3 win:31:2", h.floorArg(10), "the floor lists each band's windows in order")

	var nilH *handback
	c := nilH.merge(h)
	c.windows[0].units = 99
	assert.Equal(t, 3.0, h.windows[0].units, "merge into nil copied the windows")

	wins := func() (ws []int64) {
		for _, x := range h.windows {
			if x.band == "win" {
				ws = append(ws, x.w)
			}
		}
		return ws
	}
	for w := int64(32); w < 30+maxHandWindows; w++ {
		h = h.merge(&handback{windows: []windowUnits{{"win", w, 1}}})
	}
	assert.Len(t, wins(), maxHandWindows)
	assert.Contains(t, wins(), int64(30), "a window was dropped within the bound")
	h = h.merge(&handback{windows: []windowUnits{{"win", 30 + maxHandWindows, 1}}})
	assert.Len(t, wins(), maxHandWindows)
	assert.NotContains(t, wins(), int64(30), "the earliest window of the band was kept past the bound")
	assert.Contains(t, wins(), int64(31))
	assert.Contains(t, h.windows, windowUnits{"day", 7, 1}, "another band's window was dropped")
}
