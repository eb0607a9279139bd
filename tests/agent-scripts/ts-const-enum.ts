const enum Tier { Read, Write }
Tier.Write
