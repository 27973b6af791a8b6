package libpod

import spec "github.com/opencontainers/runtime-spec/specs-go"

// SpecGenerator is the body of a container's creation: the fields of
// Podman's specgen.SpecGenerator that the Podman backend sets, with the
// JSON names Podman gives them. A field left at its zero value is not
// sent, as the bindings do not send it.
type SpecGenerator struct {
	Name  string `json:"name,omitempty"`
	Image string `json:"image"`
	// Entrypoint is sent even when empty, which is no entrypoint; not
	// sent (specgen's omitempty, which the bindings marshal by) is the
	// image's.
	Entrypoint []string          `json:"entrypoint"`
	Command    []string          `json:"command,omitempty"`
	HTTPProxy  *bool             `json:"httpproxy,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
	Terminal   *bool             `json:"terminal,omitempty"`
	Stdin      *bool             `json:"stdin,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`

	LogConfiguration *LogConfig `json:"log_configuration,omitempty"`
	OCIRuntime       string     `json:"oci_runtime,omitempty"`
	Hostname         string     `json:"hostname,omitempty"`
	Remove           *bool      `json:"remove,omitempty"`
	UnsetEnvAll      *bool      `json:"unsetenvall,omitempty"`
	Init             *bool      `json:"init,omitempty"`

	Mounts  []spec.Mount   `json:"mounts,omitempty"`
	Volumes []*NamedVolume `json:"volumes,omitempty"`
	IpcNS   *Namespace     `json:"ipcns,omitempty"`
	ShmSize *int64         `json:"shm_size,omitempty"`
	WorkDir string         `json:"work_dir,omitempty"`
	User    string         `json:"user,omitempty"`

	CapDrop            []string             `json:"cap_drop,omitempty"`
	SeccompProfilePath string               `json:"seccomp_profile_path,omitempty"`
	NoNewPrivileges    *bool                `json:"no_new_privileges,omitempty"`
	UserNS             *Namespace           `json:"userns,omitempty"`
	IDMappings         *IDMappingOptions    `json:"idmappings,omitempty"`
	ReadOnlyFilesystem *bool                `json:"read_only_filesystem,omitempty"`
	ReadWriteTmpfs     *bool                `json:"read_write_tmpfs,omitempty"`
	NetNS              *Namespace           `json:"netns,omitempty"`
	ResourceLimits     *spec.LinuxResources `json:"resource_limits,omitempty"`
	Rlimits            []spec.POSIXRlimit   `json:"r_limits,omitempty"`
}

// LogConfig is specgen.LogConfig: the container's log driver.
type LogConfig struct {
	Driver string `json:"driver,omitempty"`
}

// Namespace is specgen.Namespace: how the container gets a namespace.
type Namespace struct {
	NSMode string `json:"nsmode,omitempty"`
	Value  string `json:"value,omitempty"`
}

// Namespace modes (specgen.NamespaceMode).
const (
	Private   = "private"
	NoNetwork = "none"
	Bridge    = "bridge"
)

// NamedVolume is specgen.NamedVolume: a named volume mounted at Dest.
type NamedVolume struct {
	Name    string
	Dest    string
	Options []string
}

// IDMap is one range of a user namespace's uid or gid map (as
// containers/storage's idtools.IDMap).
type IDMap struct {
	ContainerID int `json:"container_id"`
	HostID      int `json:"host_id"`
	Size        int `json:"size"`
}

// IDMappingOptions is containers/storage's IDMappingOptions: the
// container's uid and gid maps.
type IDMappingOptions struct {
	UIDMap []IDMap
	GIDMap []IDMap
}
