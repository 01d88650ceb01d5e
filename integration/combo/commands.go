package combo

import (
	"bufio"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/pacer-go/pacer/reserve"
)

// The runner's commands to a fleet process, one a line on its stdin after
// the start:
//
//	close           stop calling, then Close the Limiter and exit (FaultClose)
//	pause KEY NS    Limiter.Pause(KEY, NS) from this process (LocalPause)

// commands reads the runner's commands until stdin ends; stop ends the
// process's calls.
func (c *child) commands(in *bufio.Reader, stop func()) {
	for {
		line, err := in.ReadString('\n')
		if err != nil {
			return
		}
		f := strings.Fields(line)
		switch {
		case len(f) == 1 && f[0] == "close":
			c.closed.Store(true)
			stop()
		case len(f) == 3 && f[0] == "pause":
			var d int64
			if _, err := fmt.Sscan(f[2], &d); err != nil || d <= 0 {
				c.errNote("command", f[1], fmt.Errorf("bad command %q", strings.TrimSpace(line)))
				continue
			}
			go c.commandPause(f[1], time.Duration(d))
		default:
			c.errNote("command", "", fmt.Errorf("unknown command %q", strings.TrimSpace(line)))
		}
	}
}

// commandPause pauses key for d through this process's Limiter, and notes
// it as a pause of this process (Op "command").
func (c *child) commandPause(key string, d time.Duration) {
	start := time.Now()
	err := c.l.Pause(c.after, key, d)
	n := Note{Type: notePause, Key: key, At: start.UnixNano(), End: time.Now().UnixNano(), D: int64(d), Op: "command"}
	if err != nil {
		n.Err = err.Error()
		if !ended(c.after) && !(errors.Is(err, reserve.ErrUnavailable) && documentedUnavailable(err)) {
			c.errNote("pause", key, err)
		}
	}
	c.note(n)
}
