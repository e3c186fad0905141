package main

// The connection lifecycle of docs/protocol.md §4: initialize, initialized, and the gate
// that refuses other methods before them.

import (
	"fmt"
)

// handleNotification applies a client notification. Only "initialized" means anything.
func (c *conn) handleNotification(name string) bool {
	c.mu.Lock()
	st := c.state
	if name == "initialized" && st != stateNew {
		c.state = stateReady
	}
	c.mu.Unlock()
	switch {
	case name == "initialized" && st == stateNew:
		c.fail(fmt.Errorf("%w: initialized sent before initialize", errClientProtocol))
		return false
	case name == "initialized":
		return true
	}
	// An unexpected notification gets an error with id -1 and the connection stays
	// (docs/protocol.md §4.1; 0.169 drops TCP instead, §12).
	c.sendError(nil, errInvalidRequest("unexpected notification `%s`", name))
	return true
}

// gate applies the lifecycle gate of docs/protocol.md §4.3 for a method family.
func (c *conn) gate(family string) error {
	if family == "" {
		return nil
	}
	c.mu.Lock()
	st := c.state
	c.mu.Unlock()
	switch st {
	case stateNew:
		return errInvalidRequest("client must call initialize before using %s methods", family)
	case stateInitialized:
		return errInvalidRequest("client must send initialized before using %s methods", family)
	}
	return nil
}

// initializeParams are the params of initialize (docs/protocol.md §4.2).
type initializeParams struct {
	ClientName      string  `json:"clientName"`
	ResumeSessionID *string `json:"resumeSessionId"`
}

type initializeResult struct {
	SessionID       string           `json:"sessionId"`
	EnvironmentInfo *environmentInfo `json:"environmentInfo"`
}

// initialize answers initialize (docs/protocol.md §4.2).
func (c *call) initialize(p *initializeParams) (initializeResult, error) {
	s, err := c.attach(p.ResumeSessionID)
	if err != nil {
		return initializeResult{}, err
	}
	return initializeResult{SessionID: s.id, EnvironmentInfo: c.srv.envInfo}, nil
}

// attach is initialize's part of the lifecycle: a new session, or the detached session
// resumeID resumed, attached to c.
func (c *conn) attach(resumeID *string) (*session, error) {
	c.mu.Lock()
	st := c.state
	c.mu.Unlock()
	if st != stateNew {
		return nil, errInvalidRequest("initialize may only be sent once per connection")
	}
	var s *session
	if resumeID != nil {
		var err error
		if s, err = c.srv.sessions.resume(*resumeID, c); err != nil {
			return nil, err
		}
	} else {
		var err error
		if s, err = c.srv.sessions.create(c.srv, c); err != nil {
			return nil, err
		}
	}
	c.mu.Lock()
	c.session = s
	c.state = stateInitialized
	c.mu.Unlock()
	return s, nil
}
