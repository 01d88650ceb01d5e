// Command miniredis serves an in-process miniredis
// (github.com/alicebob/miniredis/v2) on a free 127.0.0.1 port for the root
// module's tests (internal/redistest.NewMiniredis), which run it as a child
// process so that the library's go.mod does not list miniredis.
//
// It prints the address, then obeys, one per line on stdin:
//
//	fastforward <duration>   let time pass for key expiry (miniredis's FastForward)
//
// and exits when stdin closes.
package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/pacer-go/pacer/internal/testkit/internal/protocol"
)

func main() {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil { // 127.0.0.1, a free port
		protocol.Fail(fmt.Errorf("miniredis: %w", err))
	}
	defer m.Close()
	protocol.Serve(m.Addr(), func(name string, args []string) error {
		switch name {
		case "fastforward":
			if len(args) != 1 {
				return errors.New("usage: fastforward <duration>")
			}
			d, err := time.ParseDuration(args[0])
			if err != nil {
				return err
			}
			m.FastForward(d)
			return nil
		}
		return fmt.Errorf("unknown command %q", name)
	})
}
