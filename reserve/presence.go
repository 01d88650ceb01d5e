package reserve

import (
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// clientName is the name this Limiter's heartbeat connection carries
// (CLIENT SETNAME).
func clientName(id string) string { return "pacer-" + id }

// presence is a connection of the Limiter's own, named clientName(id) and
// kept open as long as the Limiter lives, so that the fleet can tell a
// process that exited (Redis closes its connections) from one that is
// silent but alive: stalled, or cut off from Redis (see checkSuspects). It
// carries no command after its name: no timeout ever closes it, so a
// process cut off from Redis keeps it open, as seen from Redis, as long as
// the network does. While Redis answers, each heartbeat checks that Redis
// still lists it (CLIENT LIST ID: a Redis restarted, or its idle timeout,
// closes it) and makes a new one if not. Without one (a Ring) or the right
// to name it and list it (an ACL without client|setname, client|id and
// client|list), the Limiter is never a suspect: when it goes silent, the
// fleet holds its share for SilentHold.
//
// A client id means something only on the server that gave it: the
// heartbeat reports the server's run id with it, and a member checks only
// the suspects whose connection was opened on the server it is connected to
// itself. After a failover (a Cluster's replica promoted, a Sentinel's) or a
// restart, the new server has none of the old connections: a member silent
// since then may be alive and cut off, so it stays held until it is heard
// from again or SilentHold passes.
type presence struct {
	mu   sync.Mutex
	conn *redis.Conn
	node redis.UniversalClient // the client conn comes from (a Cluster's node for the fleet's keys)
	cid  int64                 // its client id; 0: none
	run  string                // the run id of the server conn is open on
	deny bool                  // refused by the ACL: not tried again
	// answered: Redis answered the last heartbeat (any mode), so that
	// checking the connection is worth a round trip.
	answered bool
}

// beat records whether Redis answered a heartbeat.
func (p *presence) beat(answered bool) {
	p.mu.Lock()
	p.answered = answered
	p.mu.Unlock()
}

// lastAnswered reports whether Redis answered the last heartbeat.
func (p *presence) lastAnswered() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.answered
}

// present makes sure the presence connection is open, and returns the
// client to check suspects on, its client id (0: none) and the run id of
// its server. It runs before each heartbeat while Redis answers: on Redis,
// and pacing locally after a heartbeat Redis answered (see lastPresence).
func (l *Limiter) present(ctx context.Context) (redis.UniversalClient, int64, string) {
	p := &l.presence
	p.mu.Lock()
	defer p.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, l.opts.CallTimeout)
	defer cancel()
	if p.conn != nil {
		list, err := clientListIDs(ctx, p.node, p.cid)
		switch {
		case err == nil && strings.Contains(list, "name="+clientName(l.id)):
			return p.node, p.cid, p.run
		case err != nil && !strings.HasPrefix(err.Error(), "NOPERM"):
			return p.node, p.cid, p.run // Redis does not answer: keep it, the network may
		}
		_ = p.conn.Close()
		p.conn, p.cid, p.run = nil, 0, ""
	}
	var node *redis.Client
	switch c := l.rdb.(type) {
	case *redis.Client:
		node = c
	case *redis.ClusterClient:
		n, err := c.MasterForKey(ctx, l.fleetKeys()[0])
		if err != nil {
			return l.rdb, 0, ""
		}
		node = n
	default:
		return l.rdb, 0, ""
	}
	if p.deny {
		return node, 0, ""
	}
	conn := node.Conn()
	var (
		cid int64
		run string
	)
	err := conn.ClientSetName(ctx, clientName(l.id)).Err()
	if err == nil {
		cid, err = conn.ClientID(ctx).Result()
	}
	if err == nil {
		_, err = clientListIDs(ctx, node, cid)
	}
	if err == nil {
		run, err = runID(ctx, conn)
	}
	switch {
	case err == nil:
		p.conn, p.node, p.cid, p.run = conn, node, cid, run
		return node, cid, run
	case strings.HasPrefix(err.Error(), "NOPERM"):
		p.deny = true
		l.opts.Logger.Info("pacer: the Redis user may not name and list connections (CLIENT SETNAME, ID, LIST, INFO server): a process that exits without Close keeps its share held for Options.SilentHold",
			"limiter", l.id, "err", err)
	}
	_ = conn.Close()
	return node, 0, ""
}

// lastPresence is what present returned last, unchecked: a heartbeat
// pacing locally after one Redis did not answer names it, as checking it
// would hold the heartbeat up by a CallTimeout more. (A connection closed
// meanwhile is named until a heartbeat is answered: the next checks it.)
func (l *Limiter) lastPresence() (redis.UniversalClient, int64, string) {
	p := &l.presence
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn == nil {
		return l.rdb, 0, ""
	}
	return p.node, p.cid, p.run
}

// runID is the run id of the server conn is open on (INFO server): it
// changes when the server restarts, and differs between a master and its
// replicas.
func runID(ctx context.Context, conn *redis.Conn) (string, error) {
	info, err := conn.Info(ctx, "server").Result()
	if err != nil {
		return "", err
	}
	_, rest, _ := strings.Cut(info, "run_id:")
	if f := strings.Fields(rest); len(f) > 0 {
		return f[0], nil
	}
	return "", errors.New("pacer: INFO server names no run_id")
}

// clientListIDs is CLIENT LIST ID id...: the lines of the connections
// still open among ids.
func clientListIDs(ctx context.Context, c redis.UniversalClient, ids ...int64) (string, error) {
	args := []any{"CLIENT", "LIST", "ID"}
	for _, id := range ids {
		args = append(args, id)
	}
	return c.Do(ctx, args...).Text()
}

// absent closes the presence connection (Close, or a test's kill).
func (l *Limiter) absent() {
	p := &l.presence
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn != nil {
		_ = p.conn.Close()
		p.conn, p.cid, p.run = nil, 0, ""
	}
}
