// moray loads this at start; only its manatee mode calls it (the harness runs standalone).
exports.createClient = function () { throw new Error('moray runs standalone in the harness'); };
