package main

// Tests of remote mode's registry credentials (docs/remote.md §8): credential frames and the
// three credential sources.

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

func TestCredentialFrames(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	tests := []struct {
		name, line, wantTok, wantErr string
	}{
		{"valid", `{"version":1,"environment_id":"env-1","token":"tok-1","expires_at":1800000100}`, "tok-1", ""},
		{"extra keys ignored", `{"version":1,"environment_id":"env-1","token":"t","expires_at":1800000100,"x":2}`, "t", ""},
		{"expired", `{"version":1,"environment_id":"env-1","token":"t","expires_at":1799999999}`, "", "expired"},
		{"expires now", `{"version":1,"environment_id":"env-1","token":"t","expires_at":1800000000}`, "", "expired"},
		{"iso expiry", `{"version":1,"environment_id":"env-1","token":"t","expires_at":"2027-01-01T00:00:00Z"}`, "", "invalid executor credential frame"},
		{"string expiry number", `{"version":1,"environment_id":"env-1","token":"t","expires_at":"1800000100"}`, "", "invalid executor credential frame"},
		{"version 2", `{"version":2,"environment_id":"env-1","token":"t","expires_at":1800000100}`, "", "version 2"},
		{"other environment", `{"version":1,"environment_id":"env-2","token":"t","expires_at":1800000100}`, "", "different environment"},
		{"missing token", `{"version":1,"environment_id":"env-1","expires_at":1800000100}`, "", "required"},
		{"empty token", `{"version":1,"environment_id":"env-1","token":"","expires_at":1800000100}`, "", "empty token"},
		{"token with newline", `{"version":1,"environment_id":"env-1","token":"a\nb","expires_at":1800000100}`, "", "control"},
		{"not JSON", `tok-1`, "", "invalid executor credential frame"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, err := parseCredentialFrame([]byte(tt.line), "env-1", now)
			if tt.wantErr == "" {
				if err != nil || tok != tt.wantTok {
					t.Fatalf("= %q, %v; want %q", tok, err, tt.wantTok)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), `"t"`) || strings.Contains(err.Error(), "a\nb") {
				t.Fatalf("error leaks the token: %v", err)
			}
		})
	}
}

func testConfig(t *testing.T, remote string, extra ...string) *remoteConfig {
	t.Helper()
	return testConfigEnv(t, remote, noEnv, extra...)
}

// testConfigEnv is testConfig with the environment env.
func testConfigEnv(t *testing.T, remote string, env func(string) (string, bool), extra ...string) *remoteConfig {
	t.Helper()
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	c := &remoteConfig{lookupEnv: env, timings: testRelayTimings()}
	c.registerFlags(fs)
	if err := fs.Parse(append([]string{"--remote", remote, "--environment-id", "env-test-1"}, extra...)); err != nil {
		t.Fatal(err)
	}
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestStartCredentials(t *testing.T) {
	ctx := context.Background()
	log := discardLogger()
	t.Run("bearer line", func(t *testing.T) {
		c := testConfig(t, "http://127.0.0.1:9", "--registration-bearer-stdin")
		rc, err := c.startCredentials(ctx, strings.NewReader("TOKEN\nrest"), log)
		if err != nil {
			t.Fatal(err)
		}
		if tok, _ := rc.bearer(); tok != "TOKEN" {
			t.Fatalf("token %q", tok)
		}
	})
	t.Run("bearer line too long", func(t *testing.T) {
		c := testConfig(t, "http://127.0.0.1:9", "--registration-bearer-stdin")
		if _, err := c.startCredentials(ctx, strings.NewReader(strings.Repeat("a", 17<<10)+"\n"), log); err == nil {
			t.Fatal("accepted a 17 KiB bearer")
		}
	})
	t.Run("bearer missing", func(t *testing.T) {
		c := testConfig(t, "http://127.0.0.1:9", "--registration-bearer-stdin")
		if _, err := c.startCredentials(ctx, strings.NewReader(""), log); err == nil {
			t.Fatal("accepted an empty stdin")
		}
	})
	t.Run("rotation and end of stream", func(t *testing.T) {
		c := testConfig(t, "http://127.0.0.1:9", "--executor-credential-stdin")
		pr, pw := io.Pipe()
		exp := time.Now().Add(time.Hour).Unix()
		frame := func(tok string) string {
			b, _ := json.Marshal(map[string]any{"version": 1, "environment_id": "env-test-1", "token": tok, "expires_at": exp})
			return string(b) + "\n"
		}
		go io.WriteString(pw, frame("tok-1"))
		rc, err := c.startCredentials(ctx, pr, log)
		if err != nil {
			t.Fatal(err)
		}
		if tok, _ := rc.bearer(); tok != "tok-1" {
			t.Fatalf("token %q", tok)
		}
		io.WriteString(pw, frame("tok-2"))
		io.WriteString(pw, frame("tok-3")) // the pipe is unbuffered: tok-2 has been read now
		if tok, _ := rc.bearer(); tok != "tok-2" && tok != "tok-3" {
			t.Fatalf("token %q after rotation", tok)
		}
		pw.Close()
		<-rc.dead
		if _, err := rc.bearer(); err == nil || !strings.Contains(err.Error(), "closed") {
			t.Fatalf("after EOF: %v", err)
		}
	})
	t.Run("first frame invalid", func(t *testing.T) {
		c := testConfig(t, "http://127.0.0.1:9", "--executor-credential-stdin")
		_, err := c.startCredentials(ctx, strings.NewReader(`{"version":1,"environment_id":"env-test-1","token":"t","expires_at":1}`+"\n"), log)
		if err == nil || !strings.Contains(err.Error(), "expired") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("first frame never comes", func(t *testing.T) {
		c := testConfig(t, "http://127.0.0.1:9", "--executor-credential-stdin")
		c.timings.initialCredential = time.Millisecond
		pr, pw := io.Pipe()
		defer pw.Close()
		_, err := c.startCredentials(ctx, pr, log)
		if err == nil || !strings.Contains(err.Error(), "timed out waiting for the initial") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("api key", func(t *testing.T) {
		c := &remoteConfig{remote: "http://127.0.0.1:9", environmentID: "e", lookupEnv: func(string) (string, bool) { return "sk-x", true }}
		if err := c.validate(); err != nil {
			t.Fatal(err)
		}
		rc, err := c.startCredentials(ctx, nil, log)
		if err != nil {
			t.Fatal(err)
		}
		if tok, _ := rc.bearer(); tok != "sk-x" {
			t.Fatalf("token %q", tok)
		}
	})
}
