package redistest

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redisproc"
	"github.com/redis/go-redis/v9"
)

const (
	sentinelMasterName = "pacertest"
	sentinelCount      = 3
	sentinelQuorum     = 2

	// A master is subjectively down after sentinelDownAfter without a valid
	// reply to PING. sentinelFailoverTimeout bounds each step of a failover
	// and is half the time before a failed attempt (a split vote) is retried.
	sentinelDownAfter       = 1000 // ms
	sentinelFailoverTimeout = 3000 // ms

	sentinelReadyLimit = 20 * time.Second // until the sentinels agree on everything
	replicaSyncLimit   = 20 * time.Second // until a replica's initial sync is done
)

// dataNodeArgs are given to every redis-server that holds data in a
// replicated setup. Redis 7 defaults to diskless replication delayed by 5
// seconds in case more replicas show up; here nobody else will.
var dataNodeArgs = []string{"--repl-diskless-sync-delay", "0"}

// Sentinel is a Redis master, one replica and three Sentinels watching them,
// all redis-server processes started for one test.
type Sentinel struct {
	MasterName    string        // the name the sentinels monitor the master under
	SentinelAddrs []string      // host:port of every sentinel
	Client        *redis.Client // a ready failover client (redis.NewFailoverClient), closed on t.Cleanup

	mu        sync.Mutex
	data      map[string]*redisproc.Server // master and replica by address
	sentinels []*redisproc.Server
	killed    string    // address KillMaster killed last
	killedAt  time.Time // when
}

// NewSentinel starts a master, a replica of it (--replicaof) and three
// sentinels (redis-server --sentinel, quorum 2, down-after-milliseconds
// 1000) on free loopback ports, waits until the replica is in sync and every
// sentinel knows the master, the replica and the other two sentinels, and
// stops them all on t.Cleanup. Without redis-server on PATH the test is
// skipped, or fails when CI is set (as in New).
//
// A failover after KillMaster takes a few seconds: see WaitFailover. The
// killed master is not restarted, so the replica promoted then has no
// replica of its own and a second failover is not possible.
func NewSentinel(t testing.TB) *Sentinel {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		unavailable(t, "redis-server is not on PATH: %v", err)
	}
	s := &Sentinel{MasterName: sentinelMasterName, data: map[string]*redisproc.Server{}}

	master := startServer(t, redisproc.Spec{Bin: bin, Args: dataNodeArgs}, "sentinel master")
	replica := startServer(t, redisproc.Spec{Bin: bin,
		Args: append([]string{"--replicaof", "127.0.0.1", strconv.Itoa(master.Port())}, dataNodeArgs...)}, "sentinel replica")
	s.data[master.Addr()], s.data[replica.Addr()] = master, replica
	// Before the sentinels start: the first INFO a sentinel gets from the
	// master must list the replica, or it learns of it only 10 s later.
	if err := waitUntil(replicaSyncLimit, pollInterval, func() string { return replicaNotSynced(replica.Addr()) }); err != nil {
		t.Fatalf("redistest: sentinel replica: %v", err)
	}

	conf := sentinelConfig(s.MasterName, master.Port())
	for range sentinelCount {
		p := startServer(t, redisproc.Spec{Bin: bin, Config: conf, Args: []string{"--sentinel"}}, "sentinel")
		s.sentinels = append(s.sentinels, p)
		s.SentinelAddrs = append(s.SentinelAddrs, p.Addr())
	}
	err = waitUntil(sentinelReadyLimit, 50*time.Millisecond, func() string {
		return s.notReady(master.Addr(), replica.Addr())
	})
	if err != nil {
		t.Fatalf("redistest: sentinels: %v\n%s", err, s.logTails())
	}

	s.Client = redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    s.MasterName,
		SentinelAddrs: s.SentinelAddrs,
	})
	t.Cleanup(func() { _ = s.Client.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
	defer cancel()
	if err := s.Client.Ping(ctx).Err(); err != nil {
		t.Fatalf("redistest: PING master %q through sentinels %v: %v", s.MasterName, s.SentinelAddrs, err)
	}
	report(t, SourceProcess, "sentinel", strings.Join(s.SentinelAddrs, ","))
	return s
}

// sentinelConfig returns the configuration file of a sentinel monitoring the
// master on port under name.
func sentinelConfig(name string, port int) string {
	lines := []string{
		"sentinel resolve-hostnames no",
		"sentinel announce-hostnames no",
		fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d %d", name, port, sentinelQuorum),
		fmt.Sprintf("sentinel down-after-milliseconds %s %d", name, sentinelDownAfter),
		fmt.Sprintf("sentinel failover-timeout %s %d", name, sentinelFailoverTimeout),
		fmt.Sprintf("sentinel parallel-syncs %s 1", name),
	}
	return strings.Join(lines, "\n") + "\n"
}

// notReady returns why the sentinels are not yet all watching master and
// replica and each other, or "".
func (s *Sentinel) notReady(master, replica string) string {
	for _, addr := range s.SentinelAddrs {
		if why := sentinelNotReady(addr, s.MasterName, master, replica); why != "" {
			return "sentinel " + addr + ": " + why
		}
	}
	return ""
}

func sentinelNotReady(addr, name, master, replica string) string {
	c := redis.NewSentinelClient(&redis.Options{
		Addr: addr, DialTimeout: nodeTimeout, ReadTimeout: nodeTimeout, MaxRetries: -1, PoolSize: 1,
	})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), nodeTimeout)
	defer cancel()
	m, err := c.Master(ctx, name).Result()
	if err != nil {
		return err.Error()
	}
	for _, want := range [][2]string{
		{"flags", "master"},
		{"num-slaves", "1"},
		{"num-other-sentinels", strconv.Itoa(sentinelCount - 1)},
	} {
		if m[want[0]] != want[1] {
			return fmt.Sprintf("master %s is %q, want %q", want[0], m[want[0]], want[1])
		}
	}
	if got := net.JoinHostPort(m["ip"], m["port"]); got != master {
		return fmt.Sprintf("master is %s, want %s", got, master)
	}
	replicas, err := c.Replicas(ctx, name).Result()
	if err != nil {
		return err.Error()
	}
	if len(replicas) != 1 {
		return fmt.Sprintf("%d replicas, want 1", len(replicas))
	}
	r := replicas[0]
	if got := net.JoinHostPort(r["ip"], r["port"]); got != replica || r["flags"] != "slave" || r["master-link-status"] != "ok" {
		return fmt.Sprintf("replica %s has flags %q and master-link-status %q, want %s, \"slave\", \"ok\"",
			got, r["flags"], r["master-link-status"], replica)
	}
	return ""
}

// MasterAddr returns the address of the master as the first sentinel that
// answers reports it. During a failover the sentinels may disagree.
func (s *Sentinel) MasterAddr(t testing.TB) string {
	t.Helper()
	var errs []string
	for _, addr := range s.SentinelAddrs {
		master, err := sentinelMaster(addr, s.MasterName)
		if err == nil {
			return master
		}
		errs = append(errs, addr+": "+err.Error())
	}
	t.Fatalf("redistest: no sentinel knows master %q: %s", s.MasterName, strings.Join(errs, "; "))
	return ""
}

// sentinelMaster asks the sentinel at addr for the address of master name.
func sentinelMaster(addr, name string) (string, error) {
	c := redis.NewSentinelClient(&redis.Options{
		Addr: addr, DialTimeout: nodeTimeout, ReadTimeout: nodeTimeout, MaxRetries: -1, PoolSize: 1,
	})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), nodeTimeout)
	defer cancel()
	hp, err := c.GetMasterAddrByName(ctx, name).Result()
	if err != nil {
		return "", err
	}
	if len(hp) != 2 {
		return "", fmt.Errorf("GET-MASTER-ADDR-BY-NAME %s: %q", name, hp)
	}
	return net.JoinHostPort(hp[0], hp[1]), nil
}

// KillMaster kills the process of the current master (SIGKILL) and returns
// at once, without waiting for the failover: see WaitFailover. It returns
// the killed master's address.
func (s *Sentinel) KillMaster(t testing.TB) string {
	t.Helper()
	addr := s.MasterAddr(t)
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.data[addr]
	if p == nil {
		t.Fatalf("redistest: the sentinels report master %s, which this Sentinel did not start", addr)
	}
	if p.Stopped() {
		t.Fatalf("redistest: the sentinels report master %s, which is already dead and has no replica to promote", addr)
	}
	p.Stop() // the port stays reserved until the test ends
	s.killed, s.killedAt = addr, time.Now()
	return addr
}

// WaitFailover waits up to timeout until every sentinel reports a master
// other than the one KillMaster killed last, and that master answers ROLE as
// a master. It returns the new master's address and logs how long the
// failover took since KillMaster. With the settings here that is typically
// 2 to 5 seconds, sometimes up to 10 when the first election splits the vote;
// a timeout of 20 s is safe.
func (s *Sentinel) WaitFailover(t testing.TB, timeout time.Duration) string {
	t.Helper()
	s.mu.Lock()
	killed, killedAt := s.killed, s.killedAt
	s.mu.Unlock()
	if killed == "" {
		t.Fatalf("redistest: WaitFailover without KillMaster")
	}
	var master string
	err := waitUntil(timeout, 50*time.Millisecond, func() string {
		master = ""
		for _, addr := range s.SentinelAddrs {
			m, err := sentinelMaster(addr, s.MasterName)
			switch {
			case err != nil:
				return "sentinel " + addr + ": " + err.Error()
			case m == killed:
				return "sentinel " + addr + " still reports the killed master " + killed
			case master != "" && m != master:
				return fmt.Sprintf("sentinels disagree: %s and %s", master, m)
			}
			master = m
		}
		r, err := role(master)
		if err != nil {
			return "new master " + master + ": ROLE: " + err.Error()
		}
		if r != "master" {
			return "new master " + master + " has role " + r
		}
		return ""
	})
	if err != nil {
		t.Fatalf("redistest: failover from %s: %v\n%s", killed, err, s.logTails())
	}
	t.Logf("redistest: sentinel failover %s -> %s in %v", killed, master, time.Since(killedAt).Round(time.Millisecond))
	return master
}

// logTails returns the end of every sentinel's log, for error messages.
func (s *Sentinel) logTails() string {
	var b strings.Builder
	for _, p := range s.sentinels {
		fmt.Fprintf(&b, "=== sentinel %s ===\n%s", p.Addr(), p.LogTail())
	}
	return b.String()
}
