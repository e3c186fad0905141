package main

// A direct probe (no harness) of what the real harness does after a network drop: it dials a
// new websocket at once and sends initialize{resumeSessionId}. 0.169 accepts that first
// attempt (it has always noticed the dead TCP connection by then). When the resume is refused
// with -32010 the real harness closes that socket and retries only after about 100 ms (local)
// or 700 ms (relay), so a server that detaches slowly costs every reconnect that much. The
// session first gets a fs/watchMissing watch, as the harness's session always has one.

import (
	"encoding/json"
	"fmt"
	"net/url"
	"path/filepath"
	"time"

	"github.com/gorilla/websocket"
)

// probeResume returns how long after the drop the session could be resumed, and how many
// resume attempts were refused with -32010 first.
func probeResume(wsURL, workdir string) (time.Duration, int, error) {
	if _, err := url.Parse(wsURL); err != nil {
		return 0, 0, err
	}
	c, _, err := websocket.DefaultDialer.Dial(wsURL, nil)
	if err != nil {
		return 0, 0, err
	}
	call := func(c *websocket.Conn, id int, method string, params any) (map[string]json.RawMessage, error) {
		if err := c.WriteJSON(map[string]any{"id": id, "method": method, "params": params}); err != nil {
			return nil, err
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		for {
			var m map[string]json.RawMessage
			if err := c.ReadJSON(&m); err != nil {
				return nil, err
			}
			if string(m["id"]) == fmt.Sprint(id) {
				return m, nil
			}
		}
	}
	m, err := call(c, 1, "initialize", map[string]any{"clientName": "realcodex-probe"})
	if err != nil {
		c.Close()
		return 0, 0, err
	}
	var init struct{ SessionID string }
	json.Unmarshal(m["result"], &init)
	c.WriteJSON(map[string]any{"method": "initialized", "params": map[string]any{}})
	missing := "file://" + filepath.Join(workdir, "never-created")
	if _, err := call(c, 2, "fs/watchMissing", map[string]any{"watchId": 1, "missing": []string{missing}}); err != nil {
		c.Close()
		return 0, 0, err
	}
	c.NetConn().Close()
	dropped := time.Now()
	refused := 0
	for time.Since(dropped) < 5*time.Second {
		r, _, err := websocket.DefaultDialer.Dial(wsURL, nil)
		if err != nil {
			return 0, refused, err
		}
		m, err := call(r, 1, "initialize", map[string]any{"clientName": "realcodex-probe", "resumeSessionId": init.SessionID})
		r.Close()
		if err != nil {
			return 0, refused, err
		}
		if m["result"] != nil {
			return time.Since(dropped), refused, nil
		}
		var e struct{ Code int }
		json.Unmarshal(m["error"], &e)
		if e.Code != -32010 {
			return 0, refused, fmt.Errorf("resume answered %s", m["error"])
		}
		refused++
		time.Sleep(2 * time.Millisecond)
	}
	return 0, refused, fmt.Errorf("session still attached 5s after the drop")
}

// resumeResult runs probeResume as a check.
func resumeResult(wsURL, workdir string, log *eventLog, target string) stepResult {
	r := stepResult{Name: "direct probe: a resume sent right after a TCP drop is accepted at once"}
	took, refused, err := probeResume(wsURL, workdir)
	log.Printf("local/%s: resume probe: %v after the drop, %d refusals, err %v", target, took, refused, err)
	switch {
	case err != nil:
		r.Detail = err.Error()
	case refused > 0:
		r.Detail = fmt.Sprintf("%d resume attempts were refused with -32010 (session is already attached to another connection); resumed %v after the drop", refused, took.Round(time.Millisecond))
	default:
		r.OK = true
		r.Detail = fmt.Sprintf("%v, %d refusals", took.Round(time.Microsecond), refused)
	}
	return r
}
