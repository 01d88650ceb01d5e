// Package lua holds pacer's Redis scripts, embedded as strings.
//
// Each operation has its own file with a header giving its KEYS, ARGV (with
// units) and reply; core.lua, which reads a key group's policy and state and
// writes the state back, is put in front of each of them, so every exported
// script is complete on its own and can be loaded with redis.NewScript.
// Errors are replies whose first word is a stable code ("PACER_ARG",
// "PACER_EXCEEDS", "PACER_WRONGTYPE", "PACER_CONFIG"). The package is data
// only.
package lua

import _ "embed"

//go:embed core.lua
var core string

//go:embed reserve.lua
var reserve string

//go:embed fair.lua
var fair string

//go:embed adjust.lua
var adjust string

//go:embed pause.lua
var pause string

//go:embed peek.lua
var peek string

//go:embed claim.lua
var claim string

//go:embed hold.lua
var hold string

//go:embed resume.lua
var resume string

//go:embed note.lua
var note string

//go:embed lease.lua
var lease string

//go:embed rewrite.lua
var rewrite string

//go:embed tools.lua
var tools string

//go:embed head.lua
var head string

//go:embed fast.lua
var fast string

// Admin stores or removes a key's limit, or records an operator's action,
// in the key's history. It does not use core.lua. See admin.lua.
//
//go:embed admin.lua
var Admin string

// Adaptive reads or cuts a key's learned rate (package adaptive). It does
// not use core.lua. See adaptive.lua.
//
//go:embed adaptive.lua
var Adaptive string

// Quota keeps the fleet's count of a provider's quota of calls (package
// pacehttp): it spreads the calls left over the time to the reset. It does
// not use core.lua. See quota.lua.
//
//go:embed quota.lua
var Quota string

// Restore puts back a key's stored limit that Redis lost, as a Limiter
// last saw it, when nothing else of the key is left. It does not use
// core.lua. See restore.lua.
//
//go:embed restore.lua
var Restore string

// Seats keeps a key's in-flight band: seats taken, queued, handed off and
// given back, held by the fleet's members. It does not use core.lua. See
// seats.lua.
//
//go:embed seats.lua
var Seats string

// Heartbeat records a Limiter as live and counts the fleet. It does not use
// core.lua. See heartbeat.lua.
//
//go:embed heartbeat.lua
var Heartbeat string

var (
	// Reserve reserves slots for one or more requests, or refuses a request
	// without writing if its wait would exceed its maximum. See reserve.lua.
	Reserve = head + fast + core + reserve

	// Fair is Reserve for one tenant's requests in one lane: it books a
	// request only in the tenant's turn and within the booking horizon (or,
	// due behind plain requests, wherever its slot lies), and defers it
	// otherwise. See fair.lua.
	Fair = head + core + tools + fair + reserve

	// Adjust cancels a reservation or settles it at its actual cost. See
	// adjust.lua.
	Adjust = head + core + tools + adjust

	// Pause grants no slot before now + d and leaves every bucket empty
	// then; an operator's pause is recorded in the key's history by the
	// same call. See pause.lua and note.lua.
	Pause = head + core + tools + note + pause

	// Peek reads a key group without changing it. See peek.lua.
	Peek = head + core + tools + peek

	// Claim hands a holder the slot held for it or a fresh one, and keeps or
	// refuses a slot that is too far away. See claim.lua.
	Claim = head + core + tools + claim

	// Hold reserves and records a slot for each of several holders. See
	// hold.lua.
	Hold = head + core + tools + hold

	// Resume ends a key group's pause now; an operator's resume is
	// recorded in the key's history by the same call. See resume.lua and
	// note.lua.
	Resume = head + core + tools + note + resume

	// Lease reserves a run of consecutive one-bucket slots in one call, as
	// many unit reservations would have. See lease.lua.
	Lease = head + core + tools + lease

	// Rewrite writes a key group's state back in the format its ARGV[3]
	// asks for, changing nothing else. See rewrite.lua.
	Rewrite = head + core + tools + rewrite
)
