// The part of noVNC's RFB client (`@novnc/novnc`, its docs/API.md) that the Desktop tab
// uses: the package ships JavaScript without types.
declare module "@novnc/novnc" {
  export interface RfbOptions {
    /** Leave other viewers of the desktop connected (default true). */
    shared?: boolean;
    /** WebSocket subprotocols, when RFB opens the socket from a URL. */
    wsProtocols?: string[];
  }

  export interface RfbEvents {
    connect: CustomEvent<Record<string, never>>;
    disconnect: CustomEvent<{ clean: boolean }>;
    securityfailure: CustomEvent<{ status: number; reason?: string }>;
    desktopname: CustomEvent<{ name: string }>;
  }

  export default class RFB {
    /** Connects at once: to `urlOrChannel`'s URL, or over a WebSocket already opened. */
    constructor(target: HTMLElement, urlOrChannel: string | WebSocket, options?: RfbOptions);
    viewOnly: boolean;
    scaleViewport: boolean;
    clipViewport: boolean;
    resizeSession: boolean;
    focusOnClick: boolean;
    showDotCursor: boolean;
    /** A CSS background for the area around the screen. */
    background: string;
    qualityLevel: number;
    compressionLevel: number;
    disconnect(): void;
    focus(options?: FocusOptions): void;
    blur(): void;
    /** A key press and release (`down` undefined), or one of them. */
    sendKey(keysym: number, code: string | null, down?: boolean): void;
    addEventListener<K extends keyof RfbEvents>(type: K, listener: (event: RfbEvents[K]) => void): void;
    removeEventListener<K extends keyof RfbEvents>(type: K, listener: (event: RfbEvents[K]) => void): void;
  }
}
