package e2bapi

// NewVolume is the body of POST /volumes.
type NewVolume struct {
	// Name is the volume's name, unique among the key's volumes.
	Name string `json:"name"`
}

// Validate checks that a name was given; its rules are the lifecycle's.
func (v *NewVolume) Validate() error {
	if v.Name == "" {
		return BadRequest("name is required")
	}
	return nil
}

// VolumeInfo is one element of GET /volumes.
type VolumeInfo struct {
	VolumeID string `json:"volumeID"`
	Name     string `json:"name"`
}

// VolumeAndToken is the answer of POST /volumes and GET /volumes/{id}.
type VolumeAndToken struct {
	VolumeID string `json:"volumeID"`
	Name     string `json:"name"`
	// Token is the bearer token of the volume content API.
	Token string `json:"token"`
	// Domain replaces api.<E2B_DOMAIN> as the content API's host in the
	// SDKs; omitted when nil (they then use E2B_VOLUME_API_URL or their
	// domain).
	Domain *string `json:"domain,omitempty"`
}

// VolumeEntryStat describes a file of a volume (the volume content API's
// VolumeEntryStat).
type VolumeEntryStat struct {
	Name string `json:"name"`
	// Type is "file", "directory", "symlink" or "unknown".
	Type string `json:"type"`
	// Path is the entry's path in the volume, from "/".
	Path  string `json:"path"`
	Size  int64  `json:"size"`
	Mode  uint32 `json:"mode"`
	UID   uint32 `json:"uid"`
	GID   uint32 `json:"gid"`
	Atime Time   `json:"atime"`
	Mtime Time   `json:"mtime"`
	Ctime Time   `json:"ctime"`
	// Target is a symlink's target.
	Target string `json:"target,omitempty"`
}

// VolumeMetadata is the body of PATCH /volumecontent/{id}/path: what to
// change; an absent field stays.
type VolumeMetadata struct {
	UID  *uint32 `json:"uid,omitempty"`
	GID  *uint32 `json:"gid,omitempty"`
	Mode *uint32 `json:"mode,omitempty"`
}

// Validate accepts every body: the lifecycle checks the values.
func (*VolumeMetadata) Validate() error { return nil }
