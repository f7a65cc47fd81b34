//! The simulated datacenter: IMGAPI, SAPI and CNAPI on loopback with mock
//! servers whose global zones are directories.
