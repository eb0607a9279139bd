abstract class Check {
  abstract name(): string;
  run(): string { return `${this.name()}: ok`; }
}
class Ping extends Check { name(): string { return "ping"; } }
new Ping().run()
