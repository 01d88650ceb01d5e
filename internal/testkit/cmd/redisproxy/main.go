// Command redisproxy serves a Toxiproxy (package proxy of this module) on a
// free 127.0.0.1 port in front of the upstream given as its argument, for
// the root module's tests (internal/redistest.NewProxy), which run it as a
// child process so that the library's go.mod does not list Toxiproxy.
//
//	redisproxy <upstream host:port>
//
// It prints the proxy's address, then obeys, one per line on stdin:
//
//	latency <duration>   delay every reply (Proxy.AddLatency)
//	latency-up <duration>  delay every command (Proxy.AddCommandLatency)
//	timeout              stop all data (Proxy.AddTimeout)
//	reset                reset connections (Proxy.ResetPeer)
//	disable, enable      refuse connections, and accept them again
//	clear                remove every toxic and enable (Proxy.Clear)
//
// and exits when stdin closes.
package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/pacer-go/pacer/internal/testkit/internal/protocol"
	"github.com/pacer-go/pacer/internal/testkit/proxy"
)

func main() {
	if len(os.Args) != 2 {
		protocol.Fail(errors.New("usage: redisproxy <upstream host:port>"))
	}
	p, err := proxy.New(os.Args[1])
	if err != nil {
		protocol.Fail(err)
	}
	defer p.Close()
	protocol.Serve(p.Addr(), func(name string, args []string) error {
		if name != "latency" && name != "latency-up" && len(args) != 0 {
			return fmt.Errorf("%s takes no arguments", name)
		}
		switch name {
		case "latency", "latency-up":
			if len(args) != 1 {
				return fmt.Errorf("usage: %s <duration>", name)
			}
			d, err := time.ParseDuration(args[0])
			if err != nil {
				return err
			}
			if name == "latency-up" {
				return p.AddCommandLatency(d)
			}
			return p.AddLatency(d)
		case "timeout":
			return p.AddTimeout()
		case "reset":
			return p.ResetPeer()
		case "disable":
			p.Disable()
			return nil
		case "enable":
			return p.Enable()
		case "clear":
			return p.Clear()
		}
		return fmt.Errorf("unknown command %q", name)
	})
}
