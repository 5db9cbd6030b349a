package tickd_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tickd/tickd/clients/go/tickd"
)

// eventTimeout bounds every wait for an event: generous, since the machine may be slow and
// shared; a test waits for the event, never for a fixed time.
const eventTimeout = 60 * time.Second

// tickdServer is a real tickd started from $TICKD_BIN on a fresh data directory.
type tickdServer struct {
	t       *testing.T
	binary  string
	dataDir string
	flags   []string
	Addr    string
	process *exec.Cmd
	exited  chan error
	logMu   sync.Mutex
	log     bytes.Buffer
}

// startTickd starts tickd on 127.0.0.1:0 with the given extra flags and waits until it serves.
func startTickd(t *testing.T, flags ...string) *tickdServer {
	t.Helper()
	binary := os.Getenv("TICKD_BIN")
	if binary == "" {
		t.Fatal("TICKD_BIN is not set: it must name the tickd binary these tests start")
	}
	server := &tickdServer{t: t, binary: binary, dataDir: filepath.Join(t.TempDir(), "data"), flags: flags}
	server.start("127.0.0.1:0")
	t.Cleanup(server.kill)
	return server
}

func (s *tickdServer) start(listen string) {
	s.t.Helper()
	args := append([]string{
		"--listen", listen, "--metrics-listen", "127.0.0.1:0", "--data-dir", s.dataDir,
		"--log-format", "json", "--drain-timeout", "2s",
	}, s.flags...)
	process := exec.Command(s.binary, args...)
	process.Env = append(os.Environ(), "TICKD_LOG=info", "NO_COLOR=1")
	// Should the test binary die (a timeout, a kill), tickd dies with it.
	process.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	output, err := process.StdoutPipe()
	if err != nil {
		s.t.Fatal(err)
	}
	process.Stderr = process.Stdout
	if err := process.Start(); err != nil {
		s.t.Fatalf("starting %s: %v", s.binary, err)
	}
	s.process, s.exited = process, make(chan error, 1)
	serving := make(chan string, 1)
	go s.readLog(output, serving)
	go func() { s.exited <- process.Wait() }()
	select {
	case addr := <-serving:
		s.Addr = addr
	case err := <-s.exited:
		s.t.Fatalf("tickd exited before serving (%v); its log:\n%s", err, s.logText())
	case <-time.After(eventTimeout):
		s.t.Fatalf("tickd did not log `tickd serving`; its log:\n%s", s.logText())
	}
}

// readLog keeps tickd's log (shown when a test fails) and reports the address it serves on.
func (s *tickdServer) readLog(output io.Reader, serving chan<- string) {
	lines := bufio.NewScanner(output)
	lines.Buffer(make([]byte, 64*1024), 1024*1024)
	for lines.Scan() {
		s.logMu.Lock()
		s.log.Write(lines.Bytes())
		s.log.WriteByte('\n')
		s.logMu.Unlock()
		var line struct {
			Fields struct {
				Message string `json:"message"`
				Listen  string `json:"listen"`
			} `json:"fields"`
		}
		if json.Unmarshal(lines.Bytes(), &line) == nil && line.Fields.Message == "tickd serving" {
			serving <- line.Fields.Listen
		}
	}
}

func (s *tickdServer) logText() string {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	return s.log.String()
}

// Stop sends SIGTERM and waits for tickd to exit with status 0.
func (s *tickdServer) Stop() {
	s.t.Helper()
	if err := s.process.Process.Signal(syscall.SIGTERM); err != nil {
		s.t.Fatal(err)
	}
	select {
	case err := <-s.exited:
		if err != nil {
			s.t.Fatalf("tickd exited with %v after SIGTERM; its log:\n%s", err, s.logText())
		}
		s.process = nil
	case <-time.After(eventTimeout):
		s.t.Fatalf("tickd did not exit after SIGTERM; its log:\n%s", s.logText())
	}
}

// Crash kills tickd with SIGKILL (no drain, nothing left for tickd to do) and waits for it
// to exit.
func (s *tickdServer) Crash() {
	s.t.Helper()
	if err := s.process.Process.Signal(syscall.SIGKILL); err != nil {
		s.t.Fatal(err)
	}
	select {
	case <-s.exited:
		s.process = nil
	case <-time.After(eventTimeout):
		s.t.Fatalf("tickd did not exit after SIGKILL; its log:\n%s", s.logText())
	}
}

// Freeze stops tickd with SIGSTOP: its connections stay open but nothing answers (a host
// that vanished without closing them). It is thawed when the test ends, if not before.
func (s *tickdServer) Freeze() {
	s.t.Helper()
	if err := s.process.Process.Signal(syscall.SIGSTOP); err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(s.Thaw)
}

// Thaw resumes a frozen tickd (SIGCONT).
func (s *tickdServer) Thaw() {
	if s.process != nil {
		_ = s.process.Process.Signal(syscall.SIGCONT)
	}
}

// Start starts tickd again on the same address and data directory.
func (s *tickdServer) Start() {
	s.t.Helper()
	s.start(s.Addr)
}

// kill ends tickd if it still runs (a failed test must not leave one behind), and shows its
// log when the test failed.
func (s *tickdServer) kill() {
	if s.process != nil {
		_ = s.process.Process.Kill()
		<-s.exited
		s.process = nil
	}
	if s.t.Failed() {
		s.t.Logf("tickd's log:\n%s", s.logText())
	}
}

// dial connects a client to the server, closed when the test ends.
func (s *tickdServer) dial(t *testing.T, options ...tickd.Option) *tickd.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), eventTimeout)
	defer cancel()
	client, err := tickd.Dial(ctx, s.Addr, options...)
	if err != nil {
		t.Fatalf("dial %s: %v", s.Addr, err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// testContext is a context bounded by eventTimeout, cancelled when the test ends.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), eventTimeout)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls condition until it holds, failing the test after eventTimeout. For
// conditions that depend on tickd's state (counts), where there is no event to wait on.
func waitFor(t *testing.T, what string, condition func() bool) {
	t.Helper()
	deadline := time.Now().Add(eventTimeout)
	for !condition() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// await waits for a channel to deliver, failing the test after eventTimeout.
func await[T any](t *testing.T, what string, events <-chan T) T {
	t.Helper()
	select {
	case event := <-events:
		return event
	case <-time.After(eventTimeout):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// uniqueNamespace keeps tests apart even if they shared a server.
func uniqueNamespace(t *testing.T) string {
	return fmt.Sprintf("go-%s-%d", t.Name(), time.Now().UnixNano())
}
