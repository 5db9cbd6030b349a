package tickd_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/tickd/tickd/clients/go/tickd"
	"github.com/tickd/tickd/clients/go/tickdpb"
)

// receiver is a real HTTP server on 127.0.0.1 answering 200 to every push tickd makes,
// recording the timer key of each (the body is the expiration in proto3 JSON) by path.
type receiver struct {
	server  *httptest.Server
	mu      sync.Mutex
	pushes  map[string][]string
	arrived chan struct{} // closed and replaced on every push
}

func startReceiver(t *testing.T) *receiver {
	r := &receiver{pushes: map[string][]string{}, arrived: make(chan struct{})}
	r.server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, request *http.Request) {
		var body struct {
			Timer struct {
				Key string `json:"key"`
			} `json:"timer"`
		}
		if err := json.NewDecoder(request.Body).Decode(&body); err != nil {
			t.Errorf("a push whose body is not an expiration in JSON: %v", err)
		}
		w.WriteHeader(http.StatusOK)
		r.mu.Lock()
		defer r.mu.Unlock()
		r.pushes[request.URL.Path] = append(r.pushes[request.URL.Path], body.Timer.Key)
		close(r.arrived)
		r.arrived = make(chan struct{})
	}))
	t.Cleanup(r.server.Close)
	return r
}

// keys are the keys pushed to path so far, sorted.
func (r *receiver) keys(path string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	keys := append([]string(nil), r.pushes[path]...)
	sort.Strings(keys)
	return keys
}

// waitFor returns once every key has been pushed to path.
func (r *receiver) waitFor(t *testing.T, path string, keys ...string) {
	t.Helper()
	timeout := time.After(eventTimeout)
	for {
		r.mu.Lock()
		pushed := map[string]bool{}
		for _, key := range r.pushes[path] {
			pushed[key] = true
		}
		arrived := r.arrived
		r.mu.Unlock()
		all := true
		for _, key := range keys {
			all = all && pushed[key]
		}
		if all {
			return
		}
		select {
		case <-arrived:
		case <-timeout:
			t.Fatalf("timed out waiting for pushes of %v to %s: %v", keys, path, r.keys(path))
		}
	}
}

func registerSoon(t *testing.T, client *tickd.Client, delay time.Duration, keys ...string) {
	t.Helper()
	for _, key := range keys {
		if _, err := client.Register(testContext(t), tickd.TimerSpec{Key: key, Delay: delay}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSinkPushesListsPausesResumesAndIsRemoved(t *testing.T) {
	server := startTickd(t, "--sink-allow", "127.0.0.1")
	client := server.dial(t, tickd.WithNamespace("pushed"))
	control := client.InNamespace("control")
	receiver := startReceiver(t)
	ctx := testContext(t)
	host := strings.TrimPrefix(receiver.server.URL, "http://")
	masked := fmt.Sprintf("http://***@%s/pushed", host)
	withCredentials := (&url.URL{Scheme: "http", User: url.UserPassword("user", "secret"), Host: host, Path: "/pushed"}).String()

	set, err := client.SetSink(ctx, tickd.SinkSpec{URL: withCredentials, Rate: "50/s,burst=10"})
	if err != nil {
		t.Fatal(err)
	}
	want := tickd.Sink{Namespace: "pushed", URL: masked, Origin: tickdpb.SinkOrigin_SINK_ORIGIN_API, Rate: "50/s,burst=10"}
	if !set.Changed || set.Sink != want {
		t.Fatalf("SetSink answered %+v, want %+v", set, want)
	}
	if again, err := client.SetSink(ctx, tickd.SinkSpec{URL: withCredentials, Rate: "50/s,burst=10"}); err != nil || again.Changed {
		t.Fatalf("the same sink again (what a retry meets): %+v, %v", again, err)
	}
	if _, err := control.SetSink(ctx, tickd.SinkSpec{URL: receiver.server.URL + "/control"}); err != nil {
		t.Fatal(err)
	}

	registerSoon(t, client, 50*time.Millisecond, "first", "second", "third")
	receiver.waitFor(t, "/pushed", "first", "second", "third")
	if keys := receiver.keys("/pushed"); fmt.Sprint(keys) != "[first second third]" {
		t.Fatalf("pushed %v", keys)
	}

	listed, err := client.ListSinks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	urls := map[string]string{}
	for _, sink := range listed {
		urls[sink.Namespace] = sink.URL
	}
	if urls["pushed"] != masked || urls["control"] != receiver.server.URL+"/control" {
		t.Fatalf("ListSinks: %+v", listed)
	}

	paused, err := client.PauseSink(ctx, "")
	if err != nil || !paused.Changed || !paused.Sink.Paused {
		t.Fatalf("PauseSink: %+v, %v", paused, err)
	}
	if again, err := client.PauseSink(ctx, ""); err != nil || again.Changed {
		t.Fatalf("PauseSink again: %+v, %v", again, err)
	}
	// Due before the control's timer: once that one is pushed, these have fired, and wait.
	registerSoon(t, client, 50*time.Millisecond, "held-1", "held-2")
	registerSoon(t, control, 500*time.Millisecond, "later")
	receiver.waitFor(t, "/control", "later")
	if keys := receiver.keys("/pushed"); fmt.Sprint(keys) != "[first second third]" {
		t.Fatalf("pushed while paused: %v", keys)
	}
	state, err := client.SinkStatus(ctx, "")
	if err != nil || !state.Sink.Paused || state.Delivered != 3 {
		t.Fatalf("SinkStatus while paused: %+v, %v", state, err)
	}
	states, err := client.AllSinkStatus(ctx)
	if err != nil || len(states) < 2 {
		t.Fatalf("AllSinkStatus: %+v, %v", states, err)
	}

	resumed, err := client.ResumeSink(ctx, "")
	if err != nil || !resumed.Changed || resumed.Sink.Paused {
		t.Fatalf("ResumeSink: %+v, %v", resumed, err)
	}
	receiver.waitFor(t, "/pushed", "held-1", "held-2")
	if keys := receiver.keys("/pushed"); fmt.Sprint(keys) != "[first held-1 held-2 second third]" {
		t.Fatalf("pushed after the resume: %v", keys)
	}

	if err := client.RemoveSink(ctx, ""); err != nil {
		t.Fatal(err)
	}
	_, err = client.GetSink(ctx, "")
	assertCode(t, err, codes.NotFound)
}

func TestSinkSecretsStayUntilCleared(t *testing.T) {
	server := startTickd(t)
	client := server.dial(t, tickd.WithNamespace("signed"))
	ctx := testContext(t)
	const sinkURL = "http://127.0.0.1:9/unused"
	for _, step := range []struct {
		spec   tickd.SinkSpec
		signed bool
	}{
		{tickd.SinkSpec{URL: sinkURL, Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}}, true},
		{tickd.SinkSpec{URL: sinkURL, Rate: "5/s"}, true},
		{tickd.SinkSpec{URL: sinkURL, ClearSecrets: true}, false},
	} {
		set, err := client.SetSink(ctx, step.spec)
		if err != nil || set.Sink.Signed != step.signed {
			t.Fatalf("SetSink(%+v): %+v, %v; want signed %v", step.spec, set, err, step.signed)
		}
	}
}

func TestSinkWithAnUnreadableRateIsInvalidArgument(t *testing.T) {
	server := startTickd(t)
	client := server.dial(t)
	_, err := client.SetSink(testContext(t), tickd.SinkSpec{Namespace: "bad", URL: "http://127.0.0.1:9/x", Rate: "fast"})
	if refused := assertCode(t, err, codes.InvalidArgument); !strings.Contains(refused.Message(), "rate") {
		t.Fatalf("the refusal does not name rate: %v", refused)
	}
}
