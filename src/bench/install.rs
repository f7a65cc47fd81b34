//! `agentsadm bench install`: agentsadm against cn-agent's download path and a
//! bare `tar -xzf`.
