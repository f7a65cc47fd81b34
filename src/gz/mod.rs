//! The GZ installer: installs, upgrades, removes and reports components on
//! one server, atomically, with rollback.
