//go:build nri_v080

// The stub of github.com/containerd/nri v0.8.0 (go.v0.8.0.mod): the 11
// events of NRI v0.6-v0.9, delivered as StateChange (plus CreateContainer,
// UpdateContainer, StopContainer); no per-event methods.

package main

import (
	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
)

// stubEvents: every event this stub has a handler interface for (0x7ff).
const stubEvents = api.EventMask(0x7ff)

// runtimeNRIVersion: this stub learns none (v0.8's Configure has no NRI
// version, and the stub infers none).
func runtimeNRIVersion(stub.Stub) string { return "unknown" }
