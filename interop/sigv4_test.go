package interop

// Cross-check of the root module's SigV4 re-signing under credential masking
// (netproxy_sigv4.go, docs/network.md §8 "SigV4") against aws-sdk-go-v2's v4 signer. The root
// test signs each request of testdata/netproxy/sigv4_resign.txt with stand-in credentials,
// re-signs it for the real ones and compares with the file's authz; here the same request is
// signed directly by the SDK with the real credentials, and the Authorization must be authz
// exactly (and the session token the real one).

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// readSigV4ResignCases reads the file's cases as field maps (the format of the root module's
// testdata/README.md: blank-line separated cases of "key: value" lines and "#" comments; this
// file has no sections or steps).
func readSigV4ResignCases(t *testing.T) []map[string]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "testdata", "netproxy", "sigv4_resign.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []map[string]string
	var cur map[string]string
	for n, line := range strings.Split(string(data), "\n") {
		switch {
		case strings.TrimSpace(line) == "":
			cur = nil
		case strings.HasPrefix(line, "#"):
		default:
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				t.Fatalf("line %d: not a field: %q", n+1, line)
			}
			if cur == nil {
				cur = map[string]string{}
				cases = append(cases, cur)
			}
			cur[k] = strings.TrimSpace(v)
		}
	}
	return cases
}

func TestSigV4ResignAgainstSDK(t *testing.T) {
	cases := readSigV4ResignCases(t)
	if len(cases) < 7 || cases[0]["name"] != "credentials" {
		t.Fatalf("%d cases, the first %q; want the credentials then at least 6 requests", len(cases), cases[0]["name"])
	}
	creds := aws.Credentials{AccessKeyID: cases[0]["real key id"], SecretAccessKey: cases[0]["real secret"]}
	token := cases[0]["real token"]
	for _, c := range cases[1:] {
		t.Run(c["name"], func(t *testing.T) {
			body := c["body"]
			req, err := http.NewRequest(c["method"], c["url"], strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			if body == "" {
				req.Body, req.ContentLength = http.NoBody, 0
			}
			for i := 1; ; i++ {
				hv, ok := c["header "+strconv.Itoa(i)]
				if !ok {
					break
				}
				name, val, _ := strings.Cut(hv, ":")
				val = strings.TrimSpace(val)
				if strings.HasPrefix(val, `"`) {
					if val, err = strconv.Unquote(val); err != nil {
						t.Fatal(err)
					}
				}
				req.Header.Add(name, val)
			}
			sum := sha256.Sum256([]byte(body))
			payload := hex.EncodeToString(sum[:])
			switch p := c["payload"]; p {
			case "":
			case "sha256":
				req.Header.Set("X-Amz-Content-Sha256", payload)
			default:
				req.Header.Set("X-Amz-Content-Sha256", p)
				payload = p
			}
			when, err := time.Parse("20060102T150405Z", c["date"])
			if err != nil {
				t.Fatal(err)
			}
			cr := creds
			if c["token"] == "yes" {
				cr.SessionToken = token
			}
			s3 := c["s3"] == "yes"
			err = v4.NewSigner().SignHTTP(context.Background(), cr, req, payload, c["service"], c["region"], when,
				func(o *v4.SignerOptions) { o.DisableURIPathEscaping = s3 })
			if err != nil {
				t.Fatal(err)
			}
			if got := req.Header.Get("Authorization"); got != c["authz"] {
				t.Errorf("aws-sdk-go-v2 signs\n %q\nthe re-signed vector is\n %q", got, c["authz"])
			}
			if c["token"] == "yes" && req.Header.Get("X-Amz-Security-Token") != token {
				t.Error("the SDK did not send the real session token")
			}
		})
	}
}
