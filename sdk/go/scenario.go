package worker

import (
	"fmt"
	"strconv"
	"strings"
)

// Markers are the four protocol bytes of a stage (docs/protocol.md, "Markers").
type Markers struct {
	EOM, EOP, EOB, BNC byte
}

// DefaultMarkers: EOM newline, EOP NUL, EOB 0x17, BNC 0x11.
var DefaultMarkers = Markers{EOM: 0x0a, EOP: 0x00, EOB: 0x17, BNC: 0x11}

// Scenario is the run instruction a worker gets from its ETLSTAGE_* environment.
type Scenario struct {
	Type        string // E, T or L
	Mode        string // plain, cyclic (E); single, batch (T, L)
	BatchSize   int
	BatchDriver string // supervisor (EOB closes a batch) or worker (BNC)
	Offsets     string // cyclic E: worker or supervisor
	Markers     Markers
	Stage       string
	Instance    int
	Instances   int
	StateDir    string // a private, persistent directory for the stage ("" when none)
	BatchID     bool   // L batches open with their id (ETLSTAGE_BATCH_ID=1; docs/protocol.md: batch ids)
}

// IsBatch: a batch per request.
func (s Scenario) IsBatch() bool { return s.Mode == "batch" }

// WorkerDriven: batches closed by the worker's BNC/EOP dialogue.
func (s Scenario) WorkerDriven() bool { return s.Mode == "batch" && s.BatchDriver == "worker" }

// ConfigError is a bad run instruction (an ETLSTAGE_* value): exit status 2.
type ConfigError struct{ Msg string }

func (e *ConfigError) Error() string { return e.Msg }

// ProtocolViolation is input that breaks the protocol, or a result holding a marker: exit status 3.
type ProtocolViolation struct{ Msg string }

func (e *ProtocolViolation) Error() string { return "protocol violation: " + e.Msg }

var modes = map[string][]string{"E": {"plain", "cyclic"}, "T": {"single", "batch"}, "L": {"single", "batch"}}

// ScenarioFromEnv reads the scenario with getenv (os.Getenv); unset or empty variables take their defaults.
func ScenarioFromEnv(getenv func(string) string) (Scenario, error) {
	get := func(name, dflt string) string {
		if v := getenv("ETLSTAGE_" + name); v != "" {
			return v
		}
		return dflt
	}
	var problem error
	fail := func(format string, args ...any) {
		if problem == nil {
			problem = &ConfigError{fmt.Sprintf(format, args...)}
		}
	}
	integer := func(name, dflt string) int {
		raw := strings.TrimSpace(get(name, dflt))
		n, err := strconv.Atoi(raw)
		if err != nil {
			fail("ETLSTAGE_%s=%q: expected an integer", name, raw)
		}
		return n
	}
	word := func(name, dflt string, allowed ...string) string {
		v := get(name, dflt)
		for _, a := range allowed {
			if v == a {
				return v
			}
		}
		fail("ETLSTAGE_%s=%q: expected one of %s", name, v, strings.Join(allowed, ", "))
		return v
	}
	marker := func(name string, dflt byte) byte {
		raw := getenv("ETLSTAGE_" + name)
		if raw == "" {
			return dflt
		}
		n, err := strconv.ParseUint(raw, 16, 8)
		if err != nil || len(raw) > 2 {
			fail("ETLSTAGE_%s=%q: expected two hex digits such as 0a", name, raw)
		}
		return byte(n)
	}
	m := Markers{
		EOM: marker("EOM", DefaultMarkers.EOM),
		EOP: marker("EOP", DefaultMarkers.EOP),
		EOB: marker("EOB", DefaultMarkers.EOB),
		BNC: marker("BNC", DefaultMarkers.BNC),
	}
	named := []struct {
		name string
		b    byte
	}{{"eom", m.EOM}, {"eop", m.EOP}, {"eob", m.EOB}, {"bnc", m.BNC}}
	for i := range named {
		for j := i + 1; j < len(named); j++ {
			if named[i].b == named[j].b {
				fail("markers %s and %s are both 0x%02x; the four markers must be distinct bytes", named[i].name, named[j].name, named[i].b)
			}
		}
	}
	typ := word("TYPE", "T", "E", "T", "L")
	dfltMode := "single"
	if typ == "E" {
		dfltMode = "plain"
	}
	s := Scenario{
		Type:        typ,
		BatchSize:   integer("BATCH_SIZE", "1"),
		BatchDriver: word("BATCH_DRIVER", "supervisor", "supervisor", "worker"),
		Offsets:     word("OFFSETS", "worker", "worker", "supervisor"),
		Markers:     m,
		Stage:       get("STAGE", "stage"),
		Instance:    integer("INSTANCE", "0"),
		Instances:   integer("INSTANCES", "1"),
		StateDir:    get("STATE_DIR", ""),
		BatchID:     get("BATCH_ID", "0") == "1",
	}
	if ms, ok := modes[typ]; ok {
		s.Mode = word("MODE", dfltMode, ms...)
	}
	if problem == nil && s.BatchSize < 1 {
		fail("ETLSTAGE_BATCH_SIZE=%d: expected an integer >= 1", s.BatchSize)
	}
	return s, problem
}
