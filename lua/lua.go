// Package lua holds pacer's Redis scripts, embedded as strings.
//
// Each operation has its own file with a header giving its KEYS, ARGV (with
// units) and reply; bucket.lua, which reads and writes a bucket's state, is put
// in front of each of them, so every exported script is complete on its own
// and can be loaded with redis.NewScript. The package is data only.
package lua

import _ "embed"

//go:embed bucket.lua
var bucket string

//go:embed reserve.lua
var reserve string

//go:embed cancel.lua
var cancel string

//go:embed pause.lua
var pause string

//go:embed peek.lua
var peek string

// Heartbeat records a limiter as live and counts the live ones. It does not
// use bucket.lua. See heartbeat.lua.
//
//go:embed heartbeat.lua
var Heartbeat string

var (
	// Reserve reserves n permits, or refuses without writing if the wait
	// would exceed a maximum. See reserve.lua.
	Reserve = bucket + reserve

	// Cancel gives back a reservation's permits. See cancel.lua.
	Cancel = bucket + cancel

	// Pause grants no slot before now + d and leaves the bucket empty. See pause.lua.
	Pause = bucket + pause

	// Peek reads a bucket without changing it. See peek.lua.
	Peek = bucket + peek
)

//go:embed claim.lua
var claim string

//go:embed hold.lua
var hold string

var (
	// Claim hands a holder the slot held for it or a fresh one, and holds or
	// refuses a slot that is too far away. See claim.lua.
	Claim = bucket + claim

	// Hold reserves and records a slot for each of several holders. See
	// hold.lua.
	Hold = bucket + hold
)
