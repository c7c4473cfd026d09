package harness

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Bounds for starting and stopping a server process (dynalite, redis-server).
const (
	serverUpWait   = 30 * time.Second
	serverTermWait = 10 * time.Second
)

// child is one life of a server process that the harness started (dynalite, a private
// redis-server). It runs in its own process group, so signals reach everything it
// starts, and is killed if the test binary dies first. One goroutine waits for it.
type child struct {
	cmd    *exec.Cmd
	log    *os.File
	exited chan struct{} // closed once cmd has exited
	err    error         // cmd.Wait's result; read it only after exited is closed
}

// startChild runs cmd with its output appended to logPath and waits up to upWait until
// addr accepts connections. On failure the process is stopped and the error says why
// (pointing at the log).
func startChild(cmd *exec.Cmd, logPath, addr string, upWait, termWait time.Duration) (*child, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, err
	}
	c := &child{cmd: cmd, log: log, exited: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.exited)
	}()
	name := cmd.Args[0]
	deadline := time.Now().Add(upWait)
	for dial(addr) != nil {
		select {
		case <-c.exited:
			log.Close()
			return nil, fmt.Errorf("harness: %s exited (%v); see %s", name, c.err, logPath)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = c.stop(termWait)
			return nil, fmt.Errorf("harness: %s not listening on %s after %v; see %s", name, addr, upWait, logPath)
		}
	}
	return c, nil
}

// stop ends the process group (SIGTERM, then SIGKILL after termWait), waits for the
// process and closes its log.
func (c *child) stop(termWait time.Duration) error {
	pgid := c.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(termWait):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-c.exited
	}
	return c.log.Close()
}

// server is a child server process on a fixed loopback port whose data lives in a
// directory, so Stop followed by Start brings back the same data on the same address.
// DynaliteServer and RedisServer are servers with their own command lines.
type server struct {
	dir     string // the server's data and its log
	ownDir  bool   // dir was created by startServer and is removed by Close
	port    int
	log     string // file name of the process output in dir
	command func() (*exec.Cmd, error)
	fail    func(error) error // wraps a failure to start in the service's UnavailableError
	// ready, when set, is asked after the server accepts connections until it returns
	// nil: a server may accept connections before it serves (Redis answers LOADING
	// while it reads its append-only file back).
	ready func(addr string) error

	mu  sync.Mutex // guards run
	run *child     // nil while stopped
}

// startServer picks a free loopback port, creates a temporary directory named after
// pattern when s.dir is empty, and starts s.
func startServer(s *server, pattern string) error {
	if s.dir == "" {
		d, err := os.MkdirTemp("", pattern)
		if err != nil {
			return fmt.Errorf("harness: %w", err)
		}
		s.dir, s.ownDir = d, true
	}
	port, err := freePort()
	if err == nil {
		s.port = port
		err = s.Start()
	}
	if err != nil && s.ownDir {
		_ = os.RemoveAll(s.dir)
	}
	return err
}

func (s *server) addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// Start starts the stopped server again on the same port and data and waits until it
// accepts connections. It does nothing when the server runs.
func (s *server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.run != nil {
		return nil
	}
	cmd, err := s.command()
	if err == nil {
		s.run, err = startChild(cmd, filepath.Join(s.dir, s.log), s.addr(), serverUpWait, serverTermWait)
	}
	if err == nil && s.ready != nil {
		for end := time.Now().Add(serverUpWait); ; time.Sleep(20 * time.Millisecond) {
			if err = s.ready(s.addr()); err == nil || time.Now().After(end) {
				break
			}
		}
	}
	if err != nil {
		return s.fail(err)
	}
	return nil
}

// Stop ends the server process (SIGTERM, then SIGKILL after ten seconds) and waits for
// it; clients then see refused connections. It does nothing when the server is stopped.
func (s *server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.run == nil {
		return nil
	}
	err := s.run.stop(serverTermWait)
	s.run = nil
	return err
}

// Close stops the server and removes the directory the harness created for it.
func (s *server) Close() error {
	err := s.Stop()
	if s.ownDir {
		err = errors.Join(err, os.RemoveAll(s.dir))
	}
	return err
}

// freePort asks the kernel for a loopback port nobody listens on.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("harness: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
